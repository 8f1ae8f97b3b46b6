"""The delivery log: one `DeliveryAttempt` per channel of a firing, one `TickRun` per tick."""

from __future__ import annotations

from django.db import models

from notifications.models.notification import Notification


class DeliveryAttempt(models.Model):
    """One channel's attempt at one firing. Append-only; outlives its notification."""

    class Outcome(models.TextChoices):
        OK = "ok", "Delivered"
        FAILED = "failed", "Failed"

    notification = models.ForeignKey(
        Notification,
        on_delete=models.DO_NOTHING,
        db_constraint=False,  # history stays readable after a purge
        related_name="attempts",
    )
    firing_id = models.UUIDField()
    channel = models.CharField(max_length=16)
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    error = models.TextField(blank=True)
    error_class = models.CharField(max_length=16, blank=True)
    http_status = models.PositiveSmallIntegerField("HTTP status", null=True, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    attempted_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-attempted_at", "-id"]
        indexes = [models.Index(fields=["notification", "-attempted_at"], name="attempt_row_idx")]

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
    released = models.PositiveIntegerField(default=0)
    clock_offset = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds this host's clock was ahead of the database's when the tick began "
        "(negative: behind); empty when it could not be measured.",
    )

    class Meta:
        ordering = ["-finished_at"]
        get_latest_by = "finished_at"

    def __str__(self) -> str:
        return f"tick on {self.host} at {self.finished_at:%Y-%m-%d %H:%M:%S}"
