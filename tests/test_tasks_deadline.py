"""A task has a deadline of its own (`TASKS[...]["OPTIONS"]["TIMEOUT"]`), not the channels'
NOTIFICATIONS_CHANNEL_TIMEOUT, and its row's claim covers it: a task still running is never
started again by another `runtick`, within its deadline or past it (Django 6.0+).

Real processes: the task reports each run to a local TCP gate (`tests/support/task_gate.py`)
and runs until the test releases it; the waits are on the gate and on the children's output.
The lease is 3 s, so a task held for longer is covered only by the renewals of its claim.
"""

from __future__ import annotations

import signal
from datetime import datetime, timedelta

import django
import pytest

from notifications.models import DeliveryAttempt, Notification, TaskRun
from tests.support.processes import SUMMARY, Runtick
from tests.support.timing import GUARD_SECONDS

pytestmark = [
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6.0+: this is Django 5.2"),
    pytest.mark.django_db(transaction=True),  # the children see only committed rows
]

BACKEND = "notifications.tasks.QueueBackend"
LEASE = 3  # seconds: shorter than the task is held, longer than budget + CHANNEL_TIMEOUT


def child_settings(task_timeout: float) -> dict:
    return {
        "TASKS": {"default": {"BACKEND": BACKEND, "OPTIONS": {"TIMEOUT": task_timeout}}},
        "NOTIFICATIONS_CHANNEL_TIMEOUT": 1,  # the task runs far longer than a channel may
        "NOTIFICATIONS_TICK_BUDGET": 1,
        "NOTIFICATIONS_LEASE": LEASE,
        "NOTIFICATIONS_BACKOFF": [1],  # a retry would be due at once
    }


@pytest.fixture
def gate():
    from tests.support.task_gate import TaskGate

    opened = TaskGate()
    yield opened
    opened.release()  # no run is left waiting on it
    opened.close()


def enqueue(settings, gate, task_timeout: float):
    from tests.support.task_functions import held_at_gate

    settings.TASKS = child_settings(task_timeout)["TASKS"]
    return held_at_gate.enqueue(gate.port)


def ticks_finished(child: Runtick) -> list[datetime]:
    """When each tick of `child` finished, as its summary lines say (to the second)."""
    lines = child.stdout.splitlines()
    return [datetime.fromisoformat(line.split(" ", 1)[0]) for line in lines if SUMMARY.search(line)]


def wait_for_a_tick_started_after(child: Runtick, moment: datetime, gate) -> None:
    """Until `child` has run a whole tick that began after `moment`: one that finished a
    second or more after it (summaries are stamped to the second), then the next one; or
    until the task has started a second time (what the test asserts never happens)."""
    after = moment + timedelta(seconds=1)
    child.wait_for_output(
        lambda c: gate.runs > 1 or sum(t >= after for t in ticks_finished(c)) >= 2, timeout=GUARD_SECONDS
    )


def stop(child: Runtick) -> None:
    child.send(signal.SIGTERM)
    assert child.wait(GUARD_SECONDS) == 0, child.stderr


def test_a_task_longer_than_the_channel_timeout_runs_once_within_its_own_deadline(children, settings, gate):
    result = enqueue(settings, gate, task_timeout=GUARD_SECONDS * 4)
    first = children.start(settings=child_settings(GUARD_SECONDS * 4))  # one tick: it runs the task
    gate.wait_for_runs(1, GUARD_SECONDS)
    claimed_until = Notification.objects.get().claimed_until
    assert claimed_until is not None
    second = children.start("--loop", "0.2", settings=child_settings(GUARD_SECONDS * 4))

    # The second process ticks on past the lease the first claimed the row for, and past
    # CHANNEL_TIMEOUT, while the task still runs...
    wait_for_a_tick_started_after(second, claimed_until, gate)
    assert gate.runs == 1  # ...and never starts it: the first renews its claim
    row = Notification.objects.get()
    assert row.claimed_until is not None and row.claimed_until > claimed_until
    result.refresh()
    assert result.status == "RUNNING"

    gate.release()
    assert first.wait(GUARD_SECONDS) == 0, first.stderr
    assert first.summaries() == [{"claimed": 1, "succeeded": 1, "partial": 0, "retried": 0, "dead_lettered": 0}]
    stop(second)
    assert {s["claimed"] for s in second.summaries()} == {0}
    result.refresh()
    assert (result.status, result.return_value, len(result.worker_ids)) == ("SUCCESSFUL", "released", 1)
    assert not Notification.objects.exists() and gate.runs == 1


def test_a_task_past_its_own_deadline_is_timed_out_and_never_runs_twice_at_once(children, settings, gate):
    result = enqueue(settings, gate, task_timeout=2)
    first = children.start("--loop", "0.2", settings=child_settings(2))
    gate.wait_for_runs(1, GUARD_SECONDS)

    # Its deadline passes: the attempt is recorded as timed out, and the row keeps its claim.
    first.wait_for_output(lambda c: any(s["retried"] for s in c.summaries()), timeout=GUARD_SECONDS)
    row = Notification.objects.get()
    assert row.last_error == "task: timed out after 2s" and row.error_count == 1
    assert row.claim_token is not None and row.claimed_until is not None
    second = children.start("--loop", "0.2", settings=child_settings(2))
    # Past the retry's due time and the end of the claim the write-back kept, while the
    # first run goes on, neither process starts the task again.
    wait_for_a_tick_started_after(second, max(row.claimed_until, row.next_fire_at), gate)
    assert gate.runs == 1
    assert Notification.objects.get().claim_token == row.claim_token  # renewed, still the first's

    gate.release()  # the first run finishes; its row is handed back and settled, not run again
    first.wait_for_output(
        lambda c: sum(s["succeeded"] for child in (first, second) for s in child.summaries()) == 1,
        timeout=GUARD_SECONDS,
    )
    stop(first)
    stop(second)
    assert gate.runs == 1 and not Notification.objects.exists()
    result.refresh()
    assert (result.status, result.return_value, len(result.worker_ids)) == ("SUCCESSFUL", "released", 1)
    log = DeliveryAttempt.objects.filter(notification_id=row.pk).order_by("attempted_at")
    assert [(a.outcome, a.error) for a in log] == [("failed", "task: timed out after 2s"), ("ok", "")]
    assert TaskRun.objects.get(pk=result.id).errors == []
