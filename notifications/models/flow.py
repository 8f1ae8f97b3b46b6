"""Flow control's records: a `Target`'s circuit breaker and the `RateBucket`s of its rate limits."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Target(models.Model):
    """Where a channel delivers (a webhook host, or `email`) and its circuit breaker.

    A row exists once a target has failed or been opened by hand; healthy targets cost
    nothing. `state` moves closed -> open (after `failures` consecutive failed deliveries,
    or by hand) -> half_open (one probe in flight, claimed by one tick through this row)
    -> closed (the probe succeeded) or open again (it failed: `cooldown` doubled).
    """

    class State(models.TextChoices):
        CLOSED = "closed", "Closed"
        OPEN = "open", "Open"
        HALF_OPEN = "half_open", "Half-open (probing)"

    key = models.CharField(max_length=300, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.CLOSED)
    failures = models.PositiveIntegerField(default=0, help_text="Consecutive failed deliveries.")
    opened_at = models.DateTimeField(null=True, blank=True)
    # Open: when the probe may go. Half-open: when a probe that never reported back is
    # given up and another may go. NULL while closed, or while held open by hand.
    retry_at = models.DateTimeField(null=True, blank=True)
    cooldown = models.FloatField(default=0, help_text="Seconds of the current cooldown.")
    manual = models.BooleanField(default=False, help_text="Held open by an operator: no probe.")
    last_error = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class RateBucket(models.Model):
    """One token bucket of a target's rate limit (`key` is `<target> <N>/<unit>`), shared
    by every tick on every host: `tokens` left at `stamp` (Unix seconds)."""

    key = models.CharField(max_length=320, unique=True)
    tokens = models.FloatField()
    stamp = models.FloatField()
    granted = models.PositiveIntegerField(default=0)  # what the last taker got (read back by RETURNING)

    def __str__(self) -> str:
        return self.key
