"""What recipients chose (`Preference`) and how many firings of a throttled category
reached each of them in its current window (`ThrottleWindow`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models

from notifications.databases import SettledOnMySQL
from notifications.models.addresses import bare, is_valid
from notifications.rules.categories import MAX_CATEGORY_CHARS

MAX_RECIPIENT_CHARS = 200  # a row's `recipient`
# A preference's recipient: a row's `recipient`, or an email address (RFC 5321: 254 at most)
# for mail sent without one.
MAX_KEY_CHARS = 254
LOOKUP_CHUNK = 500  # recipient keys per query: well within every backend's parameter limit


def recipient_key(recipient: str) -> str:
    """How a recipient is stored: an email address as the tick spells it (`addresses.bare`:
    `Ada@Example.com` is `ada@example.com`), any other id as given."""
    if isinstance(recipient, str) and "@" in recipient and is_valid(recipient):
        return bare(recipient)
    return recipient


class PreferenceQuerySet(models.QuerySet["Preference"]):
    def choices_of(self, recipients: Iterable[str]) -> dict[str, dict[tuple[str, str], bool]]:
        """recipient -> {(category, channel): enabled}, for the given recipients (one query
        for up to LOOKUP_CHUNK of them)."""
        wanted = sorted({r for r in recipients if r})
        found: dict[str, dict[tuple[str, str], bool]] = {}
        for start in range(0, len(wanted), LOOKUP_CHUNK):
            rows = self.filter(recipient__in=wanted[start : start + LOOKUP_CHUNK]).values_list(
                "recipient", "category", "channel", "enabled"
            )
            for recipient, category, channel, enabled in rows:
                found.setdefault(recipient, {})[(category, channel)] = enabled
        return found


class Preference(models.Model):
    """One recipient's choice for one category, on one channel (blank: every channel)."""

    recipient = models.CharField(
        max_length=MAX_KEY_CHARS,
        help_text="The host's id for the person (user:42), or an email address for mail sent without one.",
    )
    category = models.CharField(max_length=MAX_CATEGORY_CHARS)
    channel = models.CharField(max_length=16, blank=True, default="", help_text="Blank: every channel.")
    enabled = models.BooleanField()
    updated_at = models.DateTimeField(auto_now=True)

    objects = PreferenceQuerySet.as_manager()

    class Meta:
        ordering = ["recipient", "category", "channel"]
        constraints = [
            models.UniqueConstraint(fields=["recipient", "category", "channel"], name="preference_unique"),
        ]

    def __str__(self) -> str:
        where = self.channel or "every channel"
        return f"{self.recipient}: {self.category} on {where} {'on' if self.enabled else 'off'}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Every path (the admin, a shell, a site's own code) stores the key the tick and
        # erase() look up: a choice saved as typed would be ignored and outlive erasure.
        self.recipient = recipient_key(self.recipient)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        # Before the unique check a form runs, so a second spelling of a saved key is refused.
        self.recipient = recipient_key(self.recipient)


class ThrottleWindow(SettledOnMySQL, models.Model):
    """Firings of one throttled category that reached one recipient since `window_start`
    (Unix seconds), shared by every tick on every host. `granted` is the last take's
    answer, read back in the same statement (or transaction, on MariaDB/MySQL)."""

    key = models.CharField(max_length=MAX_CATEGORY_CHARS + 1 + MAX_KEY_CHARS, unique=True)
    window_start = models.FloatField()
    count = models.PositiveIntegerField(default=0)
    granted = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.key}: {self.count} since {self.window_start:.0f}"
