"""A setting of one feature never stops the rest (SPEC version 5; issue 40 item 1).

A setting only some rows need is a check warning: `migrate`, `check` and `runtick` go on,
the tick holds the rows that need it (nothing sent, no retry spent, the reason in the admin,
in `notifications_status` and after the summary line), sends every other row, and the first
tick after the fix sends the held ones. What still stops `runtick` (a value wrong in itself)
is never silent under cron: status 1 and a line on stderr, and `notifications_status` says it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core import mail
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from notifications.api import run_tick, schedule
from notifications.models import DeliveryAttempt, Notification
from notifications.models.attachments import Attachment
from notifications.outcomes import CONFIGURATION_HOLD
from tests.support import site_channels
from tests.support.processes import REPO, child_env

pytestmark = pytest.mark.django_db(transaction=True)

NOW = timezone.now().replace(microsecond=0)
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Invoice", "body": "Attached."}
SMS = {"channels": ["sms"], "channel_data": {"sms": {"to": "+15551234567"}}}
SUPPORT = "tests.support.site_channels"
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def sms(backend: str) -> override_settings:
    return override_settings(NOTIFICATIONS_CHANNELS={"sms": {"BACKEND": backend, "OPTIONS": {}}})


@pytest.fixture(autouse=True)
def _clean_support():
    site_channels.SENT.clear()
    yield


# --- a fresh project ---------------------------------------------------------------------


def fresh_project(root: Path) -> Path:
    """`django-admin startproject` with "notifications" added to INSTALLED_APPS, nothing else."""
    root.mkdir()
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(root)], check=True, timeout=120)
    settings_file = root / "mysite" / "settings.py"
    text = settings_file.read_text()
    assert "MEDIA_ROOT" not in text
    settings_file.write_text(text.replace("INSTALLED_APPS = [\n", 'INSTALLED_APPS = [\n    "notifications",\n', 1))
    return root


def manage(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The app from the checkout, as an install would give it: on the path, not in the project
    # (a link there would take the files this test stores under the project into the checkout).
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project), "LANG": "C.UTF-8", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_fresh_project_with_the_app_and_nothing_else_migrates_checks_and_ticks(tmp_path):
    project = fresh_project(tmp_path / "site")

    migrated = manage(project, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    checked = manage(project, "check")
    assert checked.returncode == 0, checked.stderr
    assert "notifications.W028" in checked.stderr  # said, as a warning: no MEDIA_ROOT
    ticked = manage(project, "runtick")
    assert ticked.returncode == 0, ticked.stderr
    assert " claimed=0 " in ticked.stdout

    # An email with a file waits, saying where it would be read; nothing else is in its way.
    script = (
        "from notifications.api import schedule; from notifications.models.attachments import Attachment; "
        "schedule(channels=['email'], email_to='ada@example.com', subject='Invoice', body='Attached.', "
        "attachments=[Attachment('invoice.txt', b'120 EUR')])"
    )
    assert manage(project, "shell", "-c", script).returncode == 0
    ticked = manage(project, "runtick")
    assert ticked.returncode == 0, ticked.stderr
    summary, held = ticked.stdout.splitlines()
    assert " claimed=1 succeeded=0 " in summary and " deferred=1 " in summary, summary
    assert f"1 held: email: MEDIA_ROOT is unset, so attachments would be read from {project}/notifications/" in held


# --- each setting: a warning, and the tick holds only what needs it -----------------------


@pytest.mark.parametrize(
    ("overrides", "check_id"),
    [
        ({"MEDIA_ROOT": ""}, "notifications.W028"),
        ({"NOTIFICATIONS_ATTACHMENT_STORAGE": "nope"}, "notifications.W024"),
        ({"NOTIFICATIONS_EMAIL_BACKEND": "nonexistent.Backend"}, "notifications.W027"),
        ({"NOTIFICATIONS_EMAIL_BACKEND": "notifications.mail.QueuedEmailBackend"}, "notifications.W022"),
        ({"NOTIFICATIONS_CHANNELS": {"sms": {"BACKEND": "no_such_module.SMS"}}}, "notifications.W030"),
        ({"NOTIFICATIONS_CHANNELS": {"sms": {"BACKEND": f"{SUPPORT}.NotAChannel"}}}, "notifications.W031"),
    ],
)
def test_a_setting_only_some_rows_need_warns_and_stops_neither_check_nor_runtick(overrides, check_id, capsys):
    row = schedule(fire_at=NOW, channels=["webhook"], webhook_url="https://hooks.example.com/a")
    with override_settings(**overrides):
        said = StringIO()
        call_command("check", stdout=StringIO(), stderr=said)  # no SystemCheckError
        assert f"({check_id})" in said.getvalue()
        assert "ERRORS:" not in said.getvalue()
        call_command("runtick")  # neither
    assert " claimed=1 " in capsys.readouterr().out
    assert DeliveryAttempt.objects.filter(notification_id=row.pk).exists()  # the webhook was tried


def test_an_unknown_attachment_storage_holds_email_with_attachments_alone():
    with_file = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("invoice.txt", b"120 EUR")])
    plain = schedule(fire_at=NOW, **{**EMAIL, "email_to": "bob@example.com"})
    with override_settings(NOTIFICATIONS_ATTACHMENT_STORAGE="nope"):
        report = run_tick(now=NOW)
    assert [m.to for m in mail.outbox] == [["bob@example.com"]]
    assert not Notification.objects.filter(pk=plain.pk).exists()
    assert report.held() == (
        "1 held: email: NOTIFICATIONS_ATTACHMENT_STORAGE names 'nope', which is not a usable storage "
        "(InvalidStorageError)"
    )
    with_file.refresh_from_db()
    assert (with_file.error_count, with_file.last_error, with_file.next_fire_at) == (0, None, NOW + CONFIGURATION_HOLD)

    run_tick(now=with_file.next_fire_at)  # the setting fixed
    assert [m.attachments[0].filename for m in mail.outbox[1:]] == ["invoice.txt"]


def test_the_admin_and_notifications_status_say_why_email_with_attachments_waits(
    admin_client, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    with override_settings(MEDIA_ROOT="media"):
        row = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("invoice.txt", b"120 EUR")])
        reason = (
            f"email: MEDIA_ROOT is 'media', a relative path, so attachments would be read from "
            f"{tmp_path}/media/notifications/attachments (this process's directory)"
        )
        page = admin_client.get(f"/admin/notifications/notification/{row.pk}/change/").content.decode()
        assert f"Held: {escape(reason)}. Nothing is sent and no retry is spent until the setting is fixed." in page
        listing = admin_client.get("/admin/notifications/notification/").content.decode()
        assert f'title="held: {escape(reason)}"' in listing
        assert "Email with attachments is held: MEDIA_ROOT is &#x27;media&#x27;" in listing

        with pytest.raises(CommandError, match="Email with attachments is held: MEDIA_ROOT is 'media'"):
            call_command("notifications_status", "--stale-after", "1000d")
        lines = capsys.readouterr().out.splitlines()
        assert (
            f"held by this process's settings: Email with attachments is held: {reason.removeprefix('email: ')}. "
            "1 row waits for a storage every process reads alike (no retry is spent): fix the setting "
            "(manage.py check says how) and the next tick sends them."
        ) in lines


def test_the_admin_list_reads_no_row_twice_to_say_which_are_held(admin_client, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def queries_of_the_list() -> int:
        with CaptureQueriesContext(connection) as ran:
            assert admin_client.get("/admin/notifications/notification/").status_code == 200
        return len(ran.captured_queries)

    with override_settings(MEDIA_ROOT=""):
        for rows in (3, 6):
            while Notification.objects.count() < rows:
                schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("invoice.txt", b"120 EUR")])
            counted = queries_of_the_list()
            if rows == 3:
                first = counted
    assert counted == first  # the list's own query reads what `held` asks of each row


# --- a site channel whose class cannot be loaded -----------------------------------------


@pytest.mark.parametrize(
    ("backend", "problem"),
    [
        ("no_such_module.SMS", "No module named 'no_such_module'"),
        (f"{SUPPORT}.NotAChannel", f"{SUPPORT}.NotAChannel is not a subclass of notifications.channels.Channel"),
    ],
)
def test_a_site_channel_that_cannot_be_loaded_holds_its_rows_and_the_rest_go_out(backend, problem, capsys):
    with sms(f"{SUPPORT}.SMSChannel"):
        queued = schedule(fire_at=NOW, **SMS)
    email = schedule(fire_at=NOW, **EMAIL)

    with sms(backend):
        call_command("runtick")
        summary, held = capsys.readouterr().out.splitlines()
        also = schedule(fire_at=NOW, **SMS)  # accepted, and held as the rest
        with pytest.raises(CommandError, match=r"Rows of the channel 'sms' are held: cannot be loaded"):
            call_command("notifications_status", "--stale-after", "1000d")

    assert " claimed=2 succeeded=1 " in summary and " deferred=1 " in summary, summary
    assert held.endswith(
        f" 1 held: sms: cannot be loaded ({problem}) (this process's settings; manage.py check says how to fix it)"
    )
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert not Notification.objects.filter(pk=email.pk).exists()
    queued.refresh_from_db()
    assert (queued.error_count, queued.last_error, queued.dead_lettered_at) == (0, None, None)  # not unknown
    assert not DeliveryAttempt.objects.filter(notification_id=queued.pk).exists()

    with sms(f"{SUPPORT}.SMSChannel"):  # fixed: the first tick after the hold sends both
        run_tick(now=queued.next_fire_at)
    assert sorted(sent[2] for sent in site_channels.SENT) == sorted([str(queued.firing_id), str(also.firing_id)])


# --- what still stops runtick is not silent ---------------------------------------------


def test_notifications_status_says_runtick_would_refuse_to_run(capsys):
    with override_settings(NOTIFICATIONS_TICK_LIMIT=0), pytest.raises(CommandError, match="runtick refuses to run"):
        call_command("notifications_status", "--stale-after", "1000d")
    lines = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith("runtick refuses to run: notifications.E001: NOTIFICATIONS_TICK_LIMIT") for line in lines
    )
    assert lines[-1] in (
        "status: TICK REFUSED (this process's settings)",
        "status: STALE, TICK REFUSED (this process's settings)",
    )


@pytest.mark.slow
def test_cron_hears_of_a_tick_that_cannot_start(tmp_path):
    """Through django-crontab's own `crontab run`, which swallows any exception of its job."""
    job = ["* * * * *", "notifications.cron.runtick"]
    job_hash = hashlib.md5(
        json.JSONEncoder(sort_keys=True).encode(job).encode()
    ).hexdigest()  # django-crontab's id of the job
    extra = {
        "INSTALLED_APPS": [*django_settings.INSTALLED_APPS, "django_crontab"],
        "CRONJOBS": [job],
        "NOTIFICATIONS_TICK_LIMIT": 0,  # notifications.E001: wrong in itself
    }
    ran = subprocess.run(
        [
            sys.executable,
            str(REPO / "manage.py"),
            "crontab",
            "run",
            job_hash,
            "--skip-checks",
            "--settings=tests.child_settings",
        ],
        cwd=tmp_path,
        env=child_env(extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    assert "runtick did not run: notifications.E001: NOTIFICATIONS_TICK_LIMIT must be a positive integer" in ran.stderr
    assert "Traceback" not in ran.stderr
