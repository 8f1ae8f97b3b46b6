"""The delivery log: one `DeliveryAttempt` per channel of a firing, one `TickRun` per tick, and
the running totals for monitoring (`Tally`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from notifications.databases import SettledOnMySQL
from notifications.models.notification import Notification
from notifications.rules import remote_text

# Sizes of the sent log's columns: longer values are cut (`notifications.channels.results`).
SENT_TO_CHARS = remote_text.SENT_TO_CHARS
SUMMARY_CHARS = remote_text.SUMMARY_CHARS


class DeliveryAttempt(SettledOnMySQL, models.Model):
    """One channel's attempt at one firing. Append-only; outlives its notification."""

    class AttemptOutcome(models.TextChoices):
        OK = "ok", "Delivered"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped (the recipient turned it off)"
        THROTTLED = "throttled", "Skipped (throttled)"
        CANCELLED = "cancelled", "Cancelled (an escalation whose message was read in time)"

    notification = models.ForeignKey(
        Notification,
        on_delete=models.DO_NOTHING,
        db_constraint=False,  # history stays readable after a purge
        related_name="attempts",
    )
    firing_id = models.UUIDField()
    channel = models.CharField(max_length=16)
    # Where the channel delivered (`notifications.flow.targets`: a webhook's host, or
    # `email`): what the Targets list's failure sparklines and the metrics count by.
    target = models.CharField(max_length=300, blank=True, default="", db_default="")
    # The sent log, said by the channel (`Channel.describe`): who the attempt went to (email
    # addresses, a webhook's host) and what it was (a subject, an event type). Never a body,
    # a payload, a URL's path or query, or a secret.
    sent_to = models.CharField(max_length=SENT_TO_CHARS, blank=True, default="", db_default="")
    # The row's `recipient` (the host's id for the person): their history, found and
    # erased by it after the row itself is gone.
    recipient = models.CharField(max_length=200, blank=True, default="", db_default="", db_index=True)
    summary = models.CharField(max_length=SUMMARY_CHARS, blank=True, default="", db_default="")
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.TextField(blank=True)
    error_class = models.CharField(max_length=16, blank=True)
    http_status = models.PositiveSmallIntegerField("HTTP status", null=True, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    attempted_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-attempted_at", "-id"]
        indexes = [
            models.Index(fields=["notification", "-attempted_at"], name="attempt_row_idx"),
            # Failures by target over a span (the Targets list's sparklines): failures only,
            # so the index stays a fraction of the log.
            models.Index(fields=["target", "attempted_at"], name="attempt_failed_idx", condition=Q(outcome="failed")),
        ]

    def __str__(self) -> str:
        return f"{self.channel} {self.outcome} at {self.attempted_at:%Y-%m-%d %H:%M:%S}"


class TickRun(models.Model):
    """One tick's record, for the admin's health line and `notifications_status`."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(db_index=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    batches = models.PositiveIntegerField(default=0)
    claimed = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    partial = models.PositiveIntegerField(default=0)
    retried = models.PositiveIntegerField(default=0)
    dead_lettered = models.PositiveIntegerField(default=0)
    expired = models.PositiveIntegerField(default=0, db_default=0)
    deferred = models.PositiveIntegerField(default=0, db_default=0)
    skipped = models.PositiveIntegerField(default=0, db_default=0)
    released = models.PositiveIntegerField(default=0)
    clock_offset = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds this host's clock was ahead of the database's when the tick began "
        "(negative: behind); empty when it could not be measured.",
    )
    held = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="Rows this tick held for a setting, and why (its process's settings: "
        "`3 held: webhook: no signing secret configured ...`); blank when none was.",
    )
    fast_lane_off = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="Why the `runtick --loop` that ran this tick polls on PostgreSQL instead of waking "
        "on NOTIFY (its probe did not come back: a pooler in transaction mode?); blank when it wakes, "
        "or for a tick outside a loop.",
    )

    class Meta:
        ordering = ["-finished_at"]
        get_latest_by = "finished_at"

    def __str__(self) -> str:
        return f"tick on {self.host} at {self.finished_at:%Y-%m-%d %H:%M:%S}"


class Tally(models.Model):
    """Running totals for monitoring (`notifications.metrics`, `notifications.health.telemetry`),
    kept by the tick.

    Ticks are short-lived processes, so counters live in the database: each write-back adds
    its deliveries (`kind` "delivery": by channel, target and outcome) and each tick its
    duration (`kind` "tick": `outcome` is the upper bound of a histogram bucket, `total` the
    seconds), in the same transaction as what they count. A counter must not go down, so a
    target's rows are never simply deleted: those of a target idle for a while (`updated_at`)
    are folded into its channel's `other` target (`notifications.store.tallies.fold_idle`),
    which keeps the table, and the metrics' label values, from growing with every host ever
    sent to.
    """

    class Kind(models.TextChoices):
        DELIVERY = "delivery", "Delivery"
        TICK = "tick", "Tick duration"
        SKIPPED = "skipped", "Skipped firings by category"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    channel = models.CharField(max_length=16, blank=True, default="")
    target = models.CharField(max_length=300, blank=True, default="")
    outcome = models.CharField(max_length=16, blank=True, default="")
    count = models.BigIntegerField(default=0)
    total = models.FloatField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)  # last added to: idle targets are folded

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "channel", "target", "outcome"], name="tally_unique"),
        ]
        indexes = [models.Index(fields=["updated_at"], name="tally_updated_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.channel} {self.target} {self.outcome}: {self.count}"
