"""`TaskRun`: a `django.tasks` task's own record beside its queue row (`notifications.tasks`).

The task is delivered as a row of the queue (`Notification`, channels `["task"]`): the
claim, leases, retries, backoff and dead letters are the row's. What only a task has (its
path, arguments, queue, result, each failed attempt's traceback, who ran it when) lives
here, so the tick's hot table gains no column, and a result outlives its row: a one-shot
row is deleted when it succeeds, its `TaskRun` is kept `RESULT_RETENTION_DAYS`.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from notifications.databases import SettledOnMySQL
from notifications.models.notification import Notification

# Sizes of the columns; Django's own limits where it has them (a queue name, a worker id).
TASK_PATH_CHARS = 300
QUEUE_NAME_CHARS = 100
BACKEND_CHARS = 100
WORKER_IDS_KEPT = 20  # the latest workers that ran a task: a task retried forever stays bounded


class TaskRun(SettledOnMySQL, models.Model):
    """One enqueued task: what to run and what became of it."""

    class Status(models.TextChoices):
        # Django's TaskResultStatus values; the queue row says READY or RUNNING at read time.
        READY = "READY", "Ready"
        RUNNING = "RUNNING", "Running"
        SUCCESSFUL = "SUCCESSFUL", "Successful"
        FAILED = "FAILED", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The queue row that runs it: gone once it succeeded (or was purged). No constraint and
    # no cascade, so deleting rows on the tick's hot path stays a plain DELETE.
    notification = models.ForeignKey(
        Notification,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    backend = models.CharField(max_length=BACKEND_CHARS)
    task_path = models.CharField(max_length=TASK_PATH_CHARS)
    queue_name = models.CharField(max_length=QUEUE_NAME_CHARS)
    priority = models.SmallIntegerField(default=0)
    run_after = models.DateTimeField(null=True, blank=True)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.READY)
    return_value = models.JSONField(null=True, blank=True)
    # One {"exception_class_path", "traceback"} per failed attempt, oldest first.
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)
    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # Housekeeping prunes finished results by age.
            models.Index(fields=["finished_at"], name="taskrun_finished_idx", condition=Q(finished_at__isnull=False)),
            models.Index(fields=["notification"], name="taskrun_row_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.task_path} ({self.id})"
