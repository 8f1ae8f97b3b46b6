"""`notifications.cron.runtick`: the CRONJOBS entry, run as django-crontab's `crontab run` calls it."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from notifications import cron
from notifications.models import Notification

pytestmark = pytest.mark.django_db
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def test_it_ticks_and_prints_the_timestamped_summary(make_row, capsys):
    make_row()
    cron.runtick()

    out, err = capsys.readouterr()
    assert re.fullmatch(rf"{STAMP} claimed=1 succeeded=1 partial=0 retried=0 dead_lettered=0 .*\n", out)
    assert err == ""
    assert len(mail.outbox) == 1


def test_it_runs_the_system_checks_but_keeps_warnings_out_of_the_log(db, settings, capsys):
    settings.NOTIFICATIONS_TICK_LIMITT = 5  # notifications.W005
    cron.runtick()
    out, err = capsys.readouterr()
    assert "claimed=0" in out and err == ""


class Ended(Exception):
    """What `cron.end_process` raises here instead of ending the test run."""


@pytest.fixture
def exit_status(monkeypatch) -> list[int]:
    statuses: list[int] = []

    def end(status: int) -> None:
        statuses.append(status)
        raise Ended

    monkeypatch.setattr(cron, "end_process", end)
    return statuses


def test_an_error_is_one_line_on_stderr_not_a_traceback(make_row, settings, capsys, exit_status):
    # django-crontab logs an exception escaping the job with its traceback; the job raises none
    # of its own, and ends the process with status 1 (a real one in test_setting_holds.py).
    row = make_row()
    settings.NOTIFICATIONS_TICK_LIMIT = 0
    with pytest.raises(Ended):
        cron.runtick()
    assert exit_status == [1]

    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert re.fullmatch(rf"{STAMP} runtick did not run: notifications\.E001: NOTIFICATIONS_TICK_LIMIT .*", line)
    assert Notification.objects.get(pk=row.pk).claim_token is None


def test_a_bad_argument_is_one_line_too(db, capsys, exit_status):
    with pytest.raises(Ended):
        cron.runtick("--budget", "-1")
    assert exit_status == [1]
    out, err = capsys.readouterr()
    assert out == ""
    assert re.fullmatch(rf"{STAMP} runtick did not run: .*\n", err), err
