"""A `TaskRun` as Django's `TaskResult` (Django 6.0+): the status says where its row stands.

The record keeps what the last attempt came to (SUCCESSFUL, or READY after a failure,
FAILED after the last); the row of the queue says the rest: a row a tick holds is RUNNING,
a dead letter is FAILED, a row whose tick died is READY again once its lease ran out (never
stuck in RUNNING), and a requeued dead letter is READY.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from notifications.models import Notification, TaskRun

Status = TaskRun.Status


def status_of(run: TaskRun, row: Notification | None, now: datetime) -> str:
    """READY, RUNNING, SUCCESSFUL or FAILED: the record's word, checked against its row."""
    if run.status == Status.SUCCESSFUL:
        return Status.SUCCESSFUL
    if row is None or (row.dead_lettered_at is not None and row.next_fire_at is None):
        return Status.FAILED  # a dead letter (or its row purged): no tick runs it again
    if row.claimed_until is not None and row.claimed_until > now:
        return Status.RUNNING  # a tick holds it: running, or about to in that tick

    return Status.READY


def finished_at(run: TaskRun, row: Notification | None, status: str) -> datetime | None:
    if status == Status.SUCCESSFUL:
        return run.finished_at
    if status == Status.FAILED:
        return run.finished_at or (row.dead_lettered_at if row is not None else None) or run.last_attempted_at
    return None


def load_task(run: TaskRun) -> Any:
    """The `Task` the record names, with its queue, priority and run_after as enqueued."""
    task = import_string(run.task_path)
    return task.using(priority=run.priority, queue_name=run.queue_name, run_after=run.run_after, backend=run.backend)


def to_result(run: TaskRun, row: Notification | None, now: datetime, *, status: str | None = None) -> Any:
    """Django's `TaskResult` of `run` (`status` given: what an attempt in progress says)."""
    from django.tasks.base import TaskError, TaskResult  # type: ignore[import-untyped,unused-ignore]  # Django 6.0+

    status = status or status_of(run, row, now)
    result = TaskResult(
        task=load_task(run),
        id=str(run.pk),
        status=status,
        enqueued_at=run.enqueued_at,
        started_at=run.started_at,
        finished_at=finished_at(run, row, status),
        last_attempted_at=run.last_attempted_at,
        args=list(run.args),
        kwargs=dict(run.kwargs),
        backend=run.backend,
        errors=[
            TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"]) for e in run.errors
        ],
        worker_ids=list(run.worker_ids),
    )
    if status == Status.SUCCESSFUL:
        object.__setattr__(result, "_return_value", run.return_value)  # as Django's own backends set it
    return result
