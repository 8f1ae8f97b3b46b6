"""Clock skew: each tick measures its host's offset from the database's clock and says so when it is off.

time-machine moves Python's clock only: SQLite reads the C library's clock and
PostgreSQL the server's, so a clock moved 200 s ahead is a host 200 s ahead of the
database on both. The report never stops a tick: the project's tests and host
projects' (through `notifications.testing`) move the clock freely.
"""

from __future__ import annotations

import json
import re
import socket
from contextlib import contextmanager
from datetime import timedelta

import pytest
import time_machine
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.health import clock
from notifications.health.queue import describe_offset, queue_health
from notifications.models import Notification, TickRun
from notifications.testing import capture_notifications

pytestmark = pytest.mark.django_db

SKEW = 200  # seconds, the reproducer
CHANGELIST = reverse("admin:notifications_notification_changelist")
HOST = socket.gethostname()[:255]


@contextmanager
def host_clock_ahead(seconds: float):
    """Python's clock `seconds` ahead of the database's, running on (tick=True)."""
    with time_machine.travel(timezone.now() + timedelta(seconds=seconds), tick=True):
        yield


def w101(**kwargs) -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks(**kwargs) if m.id == "notifications.W101"]


def recorded(host: str, offset: float | None) -> TickRun:
    now = timezone.now()
    return TickRun.objects.create(
        started_at=now - timedelta(seconds=2), finished_at=now, host=host, pid=4242, clock_offset=offset
    )


# --- the measurement ---------------------------------------------------------------------------------


def test_an_honest_clock_measures_close_to_zero():
    offset = clock.measure_offset()
    assert offset is not None and abs(offset) < 2


@pytest.mark.parametrize("seconds", [SKEW, -SKEW, 86400])
def test_a_moved_clock_is_measured_against_the_database(seconds):
    with host_clock_ahead(seconds):
        offset = clock.measure_offset()
    assert offset == pytest.approx(seconds, abs=3)


def test_a_database_without_a_clock_query_is_not_measured(monkeypatch):
    monkeypatch.setattr(clock, "CLOCK_QUERIES", {})
    assert clock.measure_offset() is None


@pytest.mark.django_db(transaction=True)  # a failed statement must not poison a test transaction
def test_a_failed_measurement_is_no_reason_to_fail_a_tick(monkeypatch, caplog):
    monkeypatch.setattr(clock, "CLOCK_QUERIES", dict.fromkeys(["postgresql", "sqlite"], "SELECT no_such_column"))
    assert clock.measure_offset() is None
    assert "could not read the database's clock" in caplog.text

    run_tick()

    assert TickRun.objects.get().clock_offset is None


@pytest.mark.parametrize(
    ("offset", "words"),
    [(200.26, "200.3s (3m 20s) ahead of"), (-12, "12.0s behind"), (0.4, "0.4s ahead of"), (86400, "86400.0s (1d)")],
)
def test_offsets_in_words(offset, words):
    assert describe_offset(offset).startswith(words)


# --- the tick record ---------------------------------------------------------------------------------


def test_a_tick_records_its_hosts_clock_offset():
    with host_clock_ahead(SKEW):
        run_tick()

    tick = TickRun.objects.get()
    assert tick.host == HOST
    assert tick.clock_offset == pytest.approx(SKEW, abs=3)


def test_a_tick_on_an_honest_clock_records_a_small_offset():
    run_tick()
    assert abs(TickRun.objects.get().clock_offset) < 2


def test_a_skewed_tick_still_delivers(make_row):
    """Reporting only: the tick claims and sends whatever the clocks say."""
    row = make_row(channels=["email"], email_to="ada@example.com", subject="Hi", body="Hello")
    with host_clock_ahead(SKEW):
        report = run_tick()
    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_host_projects_tests_that_move_the_clock_keep_working(time_machine):
    """`notifications.testing` under time-machine, with no extra settings."""
    time_machine.move_to(timezone.now() + timedelta(days=365), tick=False)
    with capture_notifications() as captured:
        schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="Hello")
        report = captured.tick()
    assert report.counts()["succeeded"] == 1
    assert len(captured.emails) == 1


# --- the admin header --------------------------------------------------------------------------------


def test_the_admin_header_names_the_skewed_host_and_its_offset(admin_client):
    with host_clock_ahead(SKEW):
        run_tick()
        html = admin_client.get(CHANGELIST).content.decode()

    [warning] = re.findall(r'<p class="nq-health-warning nq-clock-warning" role="alert">(.*?)</p>', html, re.S)
    assert re.search(rf"Clock skew: {re.escape(HOST)} is (19[89]|20[0-3])\.\ds \(3m [12]\ds\) ahead of", warning)
    assert "NTP" in warning
    assert "nq-health-stale" in html  # the header's red border
    assert re.search(r'clock offset <span class="nq-clock-offset">(19[89]|20[0-3])\.\ds</span>', html)


def test_the_admin_header_is_quiet_while_clocks_agree(admin_client):
    run_tick()
    html = admin_client.get(CHANGELIST).content.decode()
    assert "nq-clock-warning" not in html
    assert "Clock skew" not in html


def test_the_admin_header_names_a_host_behind_too(admin_client):
    recorded("cron-2", -42.0)
    recorded(HOST, 0.1)
    html = admin_client.get(CHANGELIST).content.decode()
    assert "Clock skew: cron-2 is 42.0s behind the database&#x27;s clock (more than 5s)" in html


# --- notifications_status ----------------------------------------------------------------------------


def test_status_fails_and_names_the_offset_past_the_threshold(capsys):
    with host_clock_ahead(SKEW):
        run_tick()
        with pytest.raises(CommandError, match=rf"Clock skew: {re.escape(HOST)} is (19[89]|20[0-3])\.\ds"):
            call_command("notifications_status")
        out = capsys.readouterr().out.splitlines()

        assert re.search(r"\(clock \+(19[89]|20[0-3])\.\ds\): claimed=0", out[2])
        assert re.fullmatch(
            rf"clock skew: {re.escape(HOST)} is (19[89]|20[0-3])\.\ds \(3m [12]\ds\) ahead of the database's clock "
            r"\(limit 5s\): synchronise it with NTP",
            out[3],
        )
        assert out[-1] == "status: CLOCK SKEW"

        # A looser threshold for a site that accepts it.
        call_command("notifications_status", "--max-clock-offset", "300")
        assert capsys.readouterr().out.splitlines()[-1] == "status: OK"


def test_status_json_carries_the_offsets_and_fails_past_the_threshold(capsys):
    recorded("cron-2", 3.0)
    with host_clock_ahead(SKEW):
        run_tick()
        with pytest.raises(CommandError):
            call_command("notifications_status", "--json")

    facts = json.loads(capsys.readouterr().out)
    assert facts["clock_offsets"]["cron-2"] == 3.0
    assert facts["clock_offsets"][HOST] == pytest.approx(SKEW, abs=3)
    assert facts["last_tick"]["clock_offset"] == pytest.approx(SKEW, abs=3)
    assert facts["max_clock_offset_seconds"] == 5
    assert facts["clock_warning"].startswith(f"Clock skew: {HOST} is ")
    assert "cron-2" not in facts["clock_warning"]  # 3 s is inside the threshold
    assert facts["stale"] is False


def test_status_passes_while_clocks_agree(capsys):
    run_tick()
    call_command("notifications_status")
    out = capsys.readouterr().out.splitlines()
    assert re.search(r"\(clock [+-]\d\.\ds\): claimed=0", out[2])
    assert out[-1] == "status: OK"
    assert not any(line.startswith("clock skew") for line in out)


def test_status_threshold_comes_from_the_setting(capsys):
    with host_clock_ahead(SKEW), override_settings(NOTIFICATIONS_MAX_CLOCK_OFFSET=300):
        run_tick()
        call_command("notifications_status")
    assert capsys.readouterr().out.splitlines()[-1] == "status: OK"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_status_refuses_a_threshold_that_is_not_a_positive_number(value):
    with pytest.raises(CommandError, match="--max-clock-offset"):
        call_command("notifications_status", "--max-clock-offset", value)


# --- the health facts --------------------------------------------------------------------------------


def test_each_host_is_judged_by_its_latest_tick():
    recorded("cron-2", 120.0)  # fixed since
    recorded("cron-3", -30.0)
    recorded("cron-2", 0.2)
    recorded("cron-4", 50.0)
    recorded("cron-4", None)  # its latest tick could not measure: no verdict on an older reading

    health = queue_health()

    assert health.clock_offsets == {"cron-2": 0.2, "cron-3": -30.0}
    assert health.skewed_hosts == {"cron-3": -30.0}


def test_an_invalid_threshold_setting_falls_back_to_the_default():
    recorded("cron-2", 6.0)
    with override_settings(NOTIFICATIONS_MAX_CLOCK_OFFSET="lots"):
        assert queue_health().max_clock_offset == 5
        assert queue_health().skewed_hosts == {"cron-2": 6.0}


# --- the system checks -------------------------------------------------------------------------------


def test_the_database_check_warns_about_this_hosts_clock():
    with host_clock_ahead(SKEW):
        [warning] = w101(databases=["default"])

    assert warning.level == checks.WARNING
    assert re.fullmatch(
        rf"The clock of {re.escape(HOST)} \(this host\) is (19[89]|20[0-3])\.\ds \(3m [12]\ds\) ahead of the "
        r"database's clock \(measured now\), more than NOTIFICATIONS_MAX_CLOCK_OFFSET \(5s\)\.",
        warning.msg,
    )
    assert "NTP" in warning.hint
    # Plain `manage.py check` (CI, deploys) does not touch the database.
    with host_clock_ahead(SKEW):
        assert w101() == []


def test_the_database_check_reports_other_hosts_from_their_last_tick():
    recorded("cron-2", -42.0)
    recorded(HOST, SKEW)  # this host's record is superseded by a live reading

    [warning] = w101(databases=["default"])

    assert warning.msg == (
        "The clock of cron-2 is 42.0s behind the database's clock (measured by its last tick), "
        "more than NOTIFICATIONS_MAX_CLOCK_OFFSET (5s)."
    )


def test_the_database_check_is_quiet_while_clocks_agree():
    run_tick()
    assert w101(databases=["default"]) == []


@pytest.mark.parametrize("value", [0, -5, "5", None, True])
def test_the_threshold_must_be_a_positive_number(value):
    with override_settings(NOTIFICATIONS_MAX_CLOCK_OFFSET=value):
        messages = [m for m in checks.run_checks() if m.id == "notifications.E015"]
    assert [(m.msg, m.hint) for m in messages] == [
        (
            f"NOTIFICATIONS_MAX_CLOCK_OFFSET must be a positive number, not {value!r}.",
            "Remove NOTIFICATIONS_MAX_CLOCK_OFFSET to use the default (5).",
        )
    ]
