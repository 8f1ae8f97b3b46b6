"""`QueueBackend`: `django.tasks` through the queue (Django 6.0+; importable on 5.2).

    TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend",
                         "QUEUES": ["default", "reports"],            # Django's own key
                         "OPTIONS": {"MAX_RETRIES": 3, "RESULT_RETENTION_DAYS": 7, "TIMEOUT": 600}}}

`enqueue` inserts two rows in the caller's transaction (a rolled-back transaction leaves
nothing to run): a `TaskRun` (what to run, and later what came of it) and a row of the
queue with channels `["task"]`, due at `run_after` (else now), in the priority class of
the task's priority, with the backend's MAX_RETRIES (else the site's). `runtick` claims
that row like any other; the `task` channel runs it.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from notifications.channels.task import results
from notifications.channels.task.retention import DEFAULT_RETENTION_DAYS, retention_days
from notifications.models import Notification, Priority, TaskRun
from notifications.tasks.arguments import check_arguments, check_return_annotation

try:  # Django 6.0+
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2: the class imports; `manage.py check` says what it needs (W070)
    BaseTaskBackend = object
    TaskResultDoesNotExist = LookupError
    task_enqueued = None

CHANNEL = "task"  # the built-in channel that runs a task row


def priority_class(priority: int) -> str:
    """The queue's priority class of a task's priority (-100 to 100, higher first)."""
    if priority > 0:
        return Priority.HIGH
    if priority < 0:
        return Priority.LOW
    return Priority.NORMAL


def max_retries(options: Any) -> int | None:
    """OPTIONS["MAX_RETRIES"] when it is a positive whole number (None: the site's)."""
    value = options.get("MAX_RETRIES") if isinstance(options, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class QueueBackend(BaseTaskBackend):  # type: ignore[misc]
    """A `django.tasks` backend whose tasks are rows of the queue, run by `runtick`."""

    supports_defer = True
    """`run_after`: the row is due then."""
    supports_async_task = True
    """A coroutine runs to completion in the tick's worker thread."""
    supports_get_result = True
    """From any process: the result is a row of `TaskRun`."""
    supports_priority = True
    """Priority above 0 is claimed as `high`, below 0 as `low`, 0 as `normal`."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.max_retries = max_retries(self.options)
        self.retention_days = retention_days(self.options)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        args, kwargs = check_arguments(task.module_path, args, kwargs)
        check_return_annotation(task.module_path, task.func)
        now = timezone.now()
        run_id = uuid.uuid4()
        with transaction.atomic():  # a savepoint inside the caller's transaction
            row = Notification.objects.create(
                channels=[CHANNEL],
                channel_data={CHANNEL: {"id": str(run_id)}},
                subject=task.module_path,
                priority=priority_class(task.priority),
                queue_name=task.queue_name,
                max_retries=self.max_retries,
                next_fire_at=task.run_after or now,
            )
            run = TaskRun.objects.create(
                id=run_id,
                notification=row,
                backend=self.alias,
                task_path=task.module_path,
                queue_name=task.queue_name,
                priority=task.priority,
                run_after=task.run_after,
                args=args,
                kwargs=kwargs,
                enqueued_at=now,
            )
        result = results.to_result(run, row, now)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: Any) -> Any:
        try:
            pk = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        run = TaskRun.objects.filter(pk=pk, backend=self.alias).first()
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        row = Notification.objects.filter(pk=run.notification_id).first() if run.notification_id else None
        if row is None and run.status != TaskRun.Status.SUCCESSFUL:
            raise TaskResultDoesNotExist(result_id)  # purged before it succeeded
        return results.to_result(run, row, timezone.now())

    def check(self, **kwargs: Any) -> list[Any]:
        from notifications.tasks.checks import backend_options

        return [*super().check(**kwargs), *backend_options(self.alias, self.options)]


__all__ = ["DEFAULT_RETENTION_DAYS", "QueueBackend", "TaskResultDoesNotExist"]
