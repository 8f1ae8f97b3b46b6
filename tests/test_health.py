"""Queue health: the facts, `manage.py notifications_status`, the W100 system check, tick records, pruning."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications import store
from notifications.api import run_tick
from notifications.health.queue import humanize, queue_health
from notifications.models import DeliveryAttempt, Notification, State, TickRun
from notifications.store.housekeeping import PRUNE_BATCH
from tests.support.queue_states import make, one_of_each

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent


def tick_finished(ago: timedelta, **counts) -> TickRun:
    now = timezone.now()
    return TickRun.objects.create(
        started_at=now - ago - timedelta(seconds=2), finished_at=now - ago, host="cron-1", pid=4242, **counts
    )


# --- the facts -------------------------------------------------------------------------------------


def test_counts_per_state_match_the_admin_filter_in_two_queries():
    one_of_each()
    make("dead")
    make("partial", recurrence_rule="0 9 * * *")
    now = timezone.now()

    with CaptureQueriesContext(connection) as queries:
        health = queue_health(now)

    assert len(queries) == 2
    assert health.counts == {
        "due": 1,
        "scheduled": 1,
        "retrying": 1,
        "partial": 2,
        "dead": 2,
        "parked": 1,
        "paused": 0,
        "expired": 0,
        "digest": 0,
        "escalation": 0,
    }
    for state in State:
        assert health.counts[state.value] == Notification.objects.in_state(state.value, now).count(), state
    assert health.total == Notification.objects.count()


def test_oldest_due_row_counts_what_a_tick_would_claim():
    now = timezone.now()
    make("scheduled")  # not due
    dead = make("dead")
    Notification.objects.filter(pk=dead.pk).update(next_fire_at=now - timedelta(hours=5))  # retries spent
    retrying = make("retrying")
    Notification.objects.filter(pk=retrying.pk).update(next_fire_at=now - timedelta(minutes=12))
    make("due")  # 5 minutes overdue

    health = queue_health(now)

    assert health.oldest_due_at == now - timedelta(minutes=12)
    assert health.oldest_due_age == timedelta(minutes=12)


def test_nothing_due_and_no_tick_ever():
    health = queue_health()
    assert health.oldest_due_at is None and health.oldest_due_age is None
    assert health.last_tick is None and health.stale
    assert health.warning == "No tick has ever finished: the cron line (manage.py runtick) is not running."


@pytest.mark.parametrize(
    ("ago", "stale"),
    [
        (timedelta(seconds=5), False),
        (timedelta(minutes=2, seconds=50), False),
        (timedelta(minutes=3, seconds=10), True),
    ],
)
def test_stale_after_three_minutes_without_a_finished_tick(ago, stale):
    tick_finished(timedelta(hours=2))  # an older tick never hides a recent one
    tick_finished(ago, claimed=4, succeeded=3, partial=1)

    health = queue_health()

    assert health.stale is stale
    assert health.last_tick_counts() == {
        "claimed": 4,
        "succeeded": 3,
        "partial": 1,
        "retried": 0,
        "dead_lettered": 0,
        "expired": 0,
        "deferred": 0,
    }
    if stale:
        assert health.warning.startswith("No tick has finished in the last 3m (the last one 3m 1")
    else:
        assert health.warning is None


def test_rows_in_flight_are_counted():
    row = make("due")
    Notification.objects.filter(pk=row.pk).update(claimed_until=timezone.now() + timedelta(minutes=1))
    assert queue_health().in_flight == 1


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (59, "59s"), (60, "1m"), (190, "3m 10s"), (7500, "2h 5m"), (90000, "1d 1h")]
)
def test_humanize(seconds, text):
    assert humanize(timedelta(seconds=seconds)) == text


# --- notifications_status ------------------------------------------------------------------------


def test_status_command_prints_the_facts_and_passes_while_ticks_run(capsys):
    make("dead")
    make("due")
    run_tick()

    call_command("notifications_status")

    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == "rows: due=0 scheduled=0 retrying=0 partial=1 dead=1 parked=0 paused=0 expired=0 digest=0 escalation=0"
        " in_flight=0"
    )
    assert out[1] == "oldest due: none"
    assert out[2].startswith("last tick: ") and f"on {socket.gethostname()}" in out[2]
    assert out[2].endswith("claimed=1 succeeded=0 partial=1 retried=0 dead_lettered=0 expired=0 deferred=0")
    assert out[3] == "status: OK"


def test_status_command_fails_when_ticks_stopped(capsys):
    tick_finished(timedelta(minutes=10))
    with pytest.raises(CommandError, match=r"No tick has finished in the last 3m \(the last one 10m"):
        call_command("notifications_status")
    assert capsys.readouterr().out.splitlines()[-1] == "status: STALE"
    # A longer allowance for hosts that tick less often.
    call_command("notifications_status", "--stale-after", "15m")


def test_status_command_json(capsys):
    tick_finished(timedelta(seconds=30), claimed=2, succeeded=2)
    make("due")

    call_command("notifications_status", "--json")

    facts = json.loads(capsys.readouterr().out)
    assert facts["counts"]["due"] == 1
    assert facts["stale"] is False and facts["warning"] is None
    assert facts["last_tick"]["host"] == "cron-1" and facts["last_tick"]["claimed"] == 2
    assert 29 <= facts["last_tick"]["age_seconds"] < 120
    assert 280 <= facts["oldest_due_age_seconds"] < 400


def run_manage(*args: str) -> subprocess.CompletedProcess:
    """`manage.py` in a child process, on this test's database."""
    db = {
        k: v for k, v in connection.settings_dict.items() if k in ("ENGINE", "NAME", "HOST", "PORT", "USER", "OPTIONS")
    }
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.child_settings",
        "NOTIFICATIONS_TEST_DATABASE": json.dumps(db),
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db(transaction=True)
def test_status_command_exit_status_for_monitoring():
    stale = run_manage("notifications_status")
    assert stale.returncode == 1
    assert "No tick has ever finished" in stale.stderr
    assert "status: STALE" in stale.stdout

    tick_finished(timedelta(seconds=10))
    fresh = run_manage("notifications_status")
    assert fresh.returncode == 0, fresh.stderr
    assert "status: OK" in fresh.stdout


# --- the system check ----------------------------------------------------------------------------


def w100(**kwargs) -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks(**kwargs) if m.id == "notifications.W100"]


def test_system_check_warns_when_ticks_stopped():
    tick_finished(timedelta(minutes=5))

    [warning] = w100(databases=["default"])

    assert warning.level == checks.WARNING
    assert warning.msg.startswith("No tick has finished in the last 3m (the last one 5m")
    assert "crontab add" in warning.hint
    # Plain `manage.py check` (CI, deploys) does not touch the database.
    assert w100() == []


def test_system_check_quiet_while_ticks_run():
    run_tick()
    assert w100(databases=["default"]) == []


# --- tick records and history retention ------------------------------------------------------------


def test_each_tick_records_a_run(webhook_server):
    webhook_server.reply.status = 503
    make("due", webhook_url=webhook_server.url())
    make("due", channels=["email"], webhook_url="")

    report = run_tick()

    run = TickRun.objects.get()
    assert (run.host, run.pid) == (socket.gethostname(), os.getpid())
    assert (run.claimed, run.succeeded, run.partial, run.retried, run.dead_lettered) == (2, 1, 1, 0, 0)
    assert run.started_at == report.started_at and run.finished_at == report.finished_at
    assert run.batches == 1


def attempt(row_id: int, at) -> DeliveryAttempt:
    return DeliveryAttempt(
        notification_id=row_id, firing_id=Notification().firing_id, channel="email", outcome="ok", attempted_at=at
    )


def test_tick_prunes_history_past_retention_and_keeps_the_rest(settings):
    settings.NOTIFICATIONS_ATTEMPT_RETENTION_DAYS = 7
    now = timezone.now()
    purged_row_id = 999_999  # history of a row that no longer exists
    DeliveryAttempt.objects.bulk_create(
        [attempt(purged_row_id, now - timedelta(days=8)), attempt(purged_row_id, now - timedelta(days=6))]
    )
    tick_finished(timedelta(days=8))

    run_tick()

    assert list(DeliveryAttempt.objects.values_list("notification_id", flat=True)) == [purged_row_id]
    assert DeliveryAttempt.objects.get().attempted_at == now - timedelta(days=6)
    assert TickRun.objects.count() == 1  # the old record went, this tick's stayed


def old_history(n: int, now, days: int = 40) -> None:
    DeliveryAttempt.objects.bulk_create([attempt(1, now - timedelta(days=days, seconds=i)) for i in range(n)])


def test_a_tick_prunes_history_until_none_is_left_past_retention(settings):
    """A site logging more than a batch of attempts per tick must not keep more history every
    minute: one tick prunes batch after batch while its budget lasts."""
    settings.NOTIFICATIONS_ATTEMPT_RETENTION_DAYS = 30
    now = timezone.now()
    old_history(2 * PRUNE_BATCH + 50, now)
    DeliveryAttempt.objects.create(
        notification_id=1, firing_id=Notification().firing_id, channel="email", outcome="ok", attempted_at=now
    )

    run_tick()

    assert list(DeliveryAttempt.objects.values_list("attempted_at", flat=True)) == [now]


def test_a_tick_past_its_budget_prunes_one_batch(settings):
    settings.NOTIFICATIONS_ATTEMPT_RETENTION_DAYS = 30
    old_history(PRUNE_BATCH + 50, timezone.now())

    run_tick(budget=0)  # the budget is spent before housekeeping begins

    assert DeliveryAttempt.objects.count() == 50
    run_tick()  # the next tick, within its budget, takes the rest
    assert DeliveryAttempt.objects.count() == 0


def test_pruning_is_bounded_per_call():
    now = timezone.now()
    DeliveryAttempt.objects.bulk_create([attempt(1, now - timedelta(days=40, minutes=i)) for i in range(5)])

    assert store.prune_history(now, 30, batch=2) == 2
    assert DeliveryAttempt.objects.count() == 3
    # The oldest go first.
    assert min(DeliveryAttempt.objects.values_list("attempted_at", flat=True)) == now - timedelta(days=40, minutes=2)
    assert store.prune_history(now, 30, batch=2) == 2
    assert store.prune_history(now, 30, batch=2) == 1
    assert store.prune_history(now, 30, batch=2) == 0


# --- a loop whose fast lane is silent (docs/databases.md, PostgreSQL behind PgBouncer) ------------


def test_a_loop_whose_fast_lane_is_off_is_said_by_status_and_json_until_its_ticks_stop_saying_it(capsys):
    why = "its own NOTIFY did not come back within 1s ...: it polls every 2s"
    loop = tick_finished(timedelta(seconds=5))
    TickRun.objects.filter(pk=loop.pk).update(fast_lane_off=why)
    TickRun.objects.filter(pk=tick_finished(timedelta(seconds=1)).pk).update(pid=7)  # another process: says nothing

    call_command("notifications_status")  # rows still go out: a note, not a failing status

    out = capsys.readouterr().out.splitlines()
    assert f"fast lane off: runtick --loop pid 4242 on cron-1: {why}" in out
    assert out[-1] == "status: OK"
    facts = queue_health().as_dict()
    assert facts["fast_lanes_off"] == {"4242 on cron-1": why}
    assert facts["fast_lane_warning"] == f"The fast lane is off: runtick --loop (pid 4242 on cron-1): {why}."

    tick_finished(timedelta(seconds=0))  # the same loop, its fast lane working again (restarted)
    assert queue_health().fast_lanes_off == {}
    TickRun.objects.all().delete()
    TickRun.objects.filter(pk=tick_finished(timedelta(minutes=10)).pk).update(fast_lane_off=why)
    assert queue_health().fast_lanes_off == {}  # a stopped loop's old record says nothing
