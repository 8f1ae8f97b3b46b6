"""One attempt at one task, in a worker thread of the tick, with a database connection of
the thread's own (the channel closes it after).

Every failure, whatever it is (the task raised, its path no longer imports, its return
value is not JSON), becomes one entry of the record's `errors` (the exception's class path
and traceback) and a failed channel result: the row's retries, backoff and dead letter
follow from the queue's rules. A record already SUCCESSFUL (a tick died between running
it and writing its row back) is not run again.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from django.utils import timezone

from notifications.channels.base import ChannelResult, ErrorClass
from notifications.channels.task import results
from notifications.models import Notification, TaskRun
from notifications.models.tasks import WORKER_IDS_KEPT

Status = TaskRun.Status
# What every attempt writes, with its outcome.
ATTEMPT_FIELDS = ["status", "started_at", "last_attempted_at", "worker_ids"]
# Bytes of a traceback kept per attempt: a task failing in deep recursion stays storable.
TRACEBACK_CHARS = 20_000


def error_entry(exc: BaseException) -> dict[str, str]:
    kind = type(exc)
    text = "".join(traceback.format_exception(exc))
    if len(text) > TRACEBACK_CHARS:
        text = "...\n" + text[-TRACEBACK_CHARS:]
    return {"exception_class_path": f"{kind.__module__}.{kind.__qualname__}", "traceback": text}


def attempt(name: str, row: Notification, worker_id: str, *, last: bool) -> ChannelResult:
    """Run the task of `row` once; `last`: no retry follows a failure (it is FAILED then)."""
    run = TaskRun.objects.filter(pk=task_id(row, name) or "", notification_id=row.pk).first()
    if run is None:  # only enqueue() makes a row and its record together
        return ChannelResult(name, error=f"{name}: no task of this row", error_class=ErrorClass.PERMANENT)
    if run.status == Status.SUCCESSFUL:
        return ChannelResult(name, sent_to=run.queue_name, summary=run.task_path)
    # Kept in memory and written once, with the attempt's outcome: one write per attempt
    # (SQLite has one writer for every tick). While it runs, its row's live claim says RUNNING.
    now = timezone.now()
    run.started_at = run.started_at or now
    run.last_attempted_at = now
    run.worker_ids = [*run.worker_ids, worker_id][-WORKER_IDS_KEPT:]
    run.status = Status.RUNNING
    try:
        task = results.load_task(run)
    except Exception as exc:  # noqa: BLE001 - a task that no longer imports fails its attempt
        return failed(name, run, exc, None, last=last)
    sender = type(task.get_backend())
    started = results.to_result(run, row, now, status=Status.RUNNING)
    send_signal("task_started", sender, started)
    try:
        value = call(task, started, run)
    except Exception as exc:  # noqa: BLE001 - the task's failure is this attempt's outcome
        return failed(name, run, exc, sender, last=last)
    run.status = Status.SUCCESSFUL
    run.return_value = value
    run.finished_at = timezone.now()
    run.save(update_fields=[*ATTEMPT_FIELDS, "return_value", "finished_at"])
    send_signal("task_finished", sender, results.to_result(run, row, run.finished_at))
    return ChannelResult(name, sent_to=run.queue_name, summary=run.task_path)


def call(task: Any, started: Any, run: TaskRun) -> Any:
    """The task's return value, as JSON keeps it (a value JSON cannot hold raises here)."""
    from django.tasks.base import TaskContext

    args = [TaskContext(task_result=started), *run.args] if task.takes_context else run.args
    value = task.call(*args, **run.kwargs)  # an async task runs to completion in this thread
    return json.loads(json.dumps(value))  # tuples become lists; a datetime or a set is refused


def failed(name: str, run: TaskRun, exc: BaseException, sender: Any, *, last: bool) -> ChannelResult:
    run.errors = [*run.errors, error_entry(exc)]
    run.status = Status.FAILED if last else Status.READY
    run.finished_at = timezone.now() if last else None
    run.save(update_fields=[*ATTEMPT_FIELDS, "errors", "finished_at"])
    if last and sender is not None:
        send_signal("task_finished", sender, results.to_result(run, None, run.finished_at or timezone.now()))
    kind = run.errors[-1]["exception_class_path"]
    # The task answered (it ran and raised): not a sign the runner is unwell, so the circuit
    # breaker does not count it; transient, so the queue's retries and backoff apply.
    return ChannelResult(
        name,
        error=f"{name}: {kind}"[:300],
        error_class=ErrorClass.TRANSIENT,
        answered=True,
        sent_to=run.queue_name,
        summary=run.task_path,
    )


def task_id(row: Notification, name: str) -> str | None:
    data = row.channel_data.get(name) if isinstance(row.channel_data, dict) else None
    value = data.get("id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def send_signal(signal_name: str, sender: Any, result: Any) -> None:
    """Django's task signal; a listener's exception is logged by Django, never the task's fate."""
    from django.tasks import signals

    getattr(signals, signal_name).send_robust(sender=sender, task_result=result)


def last_attempt(row: Notification, limit: int) -> bool:
    """Whether a failure now uses up the row's retries (`limit`: its MAX_RETRIES)."""
    return row.error_count + 1 >= limit


__all__ = ["attempt", "error_entry", "last_attempt"]
