"""Flow control's records: a `Target`'s circuit breaker and the `RateBucket`s of its rate limits."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from notifications.databases import SettledOnMySQL


class TargetQuerySet(models.QuerySet["Target"]):
    """A circuit's transitions, each one conditional UPDATE: the number of rows it moved
    (0 when another tick, or the operator, moved the circuit first)."""

    def trip(self, key: str, *, failures: int, now: datetime, cooldown: float) -> int:
        """closed -> open, once `failures` deliveries in a row have failed."""
        return self.filter(key=key, state=Target.State.CLOSED, failures__gte=failures).update(
            state=Target.State.OPEN,
            opened_at=now,
            retry_at=now + timedelta(seconds=cooldown),
            cooldown=cooldown,
            manual=False,
            updated_at=now,
        )

    def start_probe(self, key: str, *, now: datetime, until: datetime, stale: datetime | None = None) -> int:
        """open (cooldown over), or half_open (a probe never reported back) -> half_open until `until`.

        `stale`: a `retry_at` left far ahead by a fast clock, taken as over while it is still
        the stored value (so one tick wins that probe too)."""
        due = Q(retry_at__lte=now) if stale is None else Q(retry_at__lte=now) | Q(retry_at=stale)
        return self.filter(due, key=key, state__in=[Target.State.OPEN, Target.State.HALF_OPEN], manual=False).update(
            state=Target.State.HALF_OPEN, retry_at=until, updated_at=now
        )

    def reopen(self, key: str, *, now: datetime, cooldown: float, failures: int) -> int:
        """half_open -> open: the probe failed; `failures` more on the streak."""
        return self.filter(key=key, state=Target.State.HALF_OPEN).update(
            state=Target.State.OPEN,
            retry_at=now + timedelta(seconds=cooldown),
            cooldown=cooldown,
            failures=F("failures") + failures,
            updated_at=now,
        )

    def close(self, key: str, *, now: datetime, only_half_open: bool = False) -> int:
        """open or half_open (half_open only: a probe got through) -> closed, the streak cleared."""
        states = [Target.State.HALF_OPEN] if only_half_open else [Target.State.OPEN, Target.State.HALF_OPEN]
        return self.filter(key=key, state__in=states).update(
            state=Target.State.CLOSED, failures=0, retry_at=None, cooldown=0, manual=False, updated_at=now
        )

    def hold_open(self, key: str, *, now: datetime) -> int:
        """Any state -> open by hand: no probe until an operator closes it."""
        return self.filter(key=key).update(
            state=Target.State.OPEN, manual=True, opened_at=now, retry_at=None, updated_at=now
        )


class Target(SettledOnMySQL, models.Model):
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

    objects = TargetQuerySet.as_manager()

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class RateBucket(SettledOnMySQL, models.Model):
    """One token bucket of a target's rate limit (`key` is `<target> <N>/<unit>`), shared
    by every tick on every host: `tokens` left at `stamp` (Unix seconds)."""

    key = models.CharField(max_length=320, unique=True)
    tokens = models.FloatField()
    stamp = models.FloatField()
    granted = models.PositiveIntegerField(default=0)  # what the last taker got (read back by RETURNING)

    def __str__(self) -> str:
        return self.key
