"""The demo project's settings as a newcomer meets them: read from the environment.

Each case imports `notifications_project.settings` in a child process with the variables
it names (set explicitly, so a developer's `.env` cannot change the outcome), or runs
`manage.py check` the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.processes import REPO

NEW = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD = "whsec_c2VjcmV0LW9mLXRoZS1yb3ctbm90LWZvci1wYWdlcw=="
# Set for every child, so a developer's .env cannot decide the outcome (TICK_LOG is left
# unset unless a test sets it: its default is what one test checks).
BASE = {"DEBUG": "off", "DATABASE_URL": "", "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS": ""}


def environment(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "TICK_LOG")}
    env.update({**BASE, **variables, "DJANGO_SETTINGS_MODULE": "notifications_project.settings"})
    return env


def project_settings(**variables: str) -> dict:
    code = (
        "import json, notifications_project.settings as s; print(json.dumps({"
        "'secret': s.NOTIFICATIONS_WEBHOOK_SECRET, 'networks': s.NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS, "
        "'cronjobs': s.CRONJOBS, 'debug': s.DEBUG, 'media': str(s.MEDIA_ROOT)}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=environment(**variables), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check(**variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=environment(**variables),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_attachments_are_kept_under_an_absolute_media_root_beside_manage_py(tmp_path):
    # Relative, they would land inside the app's package and be lost to a tick cron runs
    # from another directory (django-crontab's line does not cd).
    assert project_settings()["media"] == str(REPO / "media")
    assert project_settings(MEDIA_ROOT=str(tmp_path))["media"] == str(tmp_path)


@pytest.mark.parametrize("separator", [",", " ", ", "])
def test_a_rotation_list_from_the_environment(separator):
    assert project_settings(NOTIFICATIONS_WEBHOOK_SECRET=f"{NEW}{separator}{OLD}")["secret"] == [NEW, OLD]


def test_one_key_from_the_environment():
    assert project_settings(NOTIFICATIONS_WEBHOOK_SECRET=NEW)["secret"] == [NEW]


@pytest.mark.slow
def test_check_passes_a_rotation_list_and_warns_of_an_empty_secret():
    rotating = check(NOTIFICATIONS_WEBHOOK_SECRET=f"{NEW},{OLD}")
    assert rotating.returncode == 0, rotating.stderr
    assert "E010" not in rotating.stderr

    empty = check(NOTIFICATIONS_WEBHOOK_SECRET="")
    assert empty.returncode == 0, empty.stderr  # a warning: the commands that send nothing go on
    assert "notifications.W010" in empty.stderr


@pytest.mark.parametrize(
    ("variables", "opened"),
    [
        ({"DEBUG": "on"}, True),  # a development checkout on the demo database: `make run`'s .env
        ({"DEBUG": "off"}, False),
        ({"DEBUG": "on", "DATABASE_URL": "sqlite:////tmp/elsewhere.sqlite3"}, False),
    ],
    ids=["debug on the demo database", "debug off", "another database"],
)
def test_loopback_is_open_only_with_debug_on_the_demo_database(variables, opened):
    networks = project_settings(**variables)["networks"]
    assert (networks == ["127.0.0.0/8", "::1/128"]) is opened
    assert opened or networks == []


def test_an_explicit_allow_list_is_kept_and_loopback_added_once():
    networks = project_settings(DEBUG="on", NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS="10.0.0.0/8,127.0.0.0/8")["networks"]
    assert networks == ["10.0.0.0/8", "127.0.0.0/8", "::1/128"]


def test_the_cron_line_appends_its_output_to_a_log_file(tmp_path):
    (job,) = project_settings()["cronjobs"]
    assert job[:2] == ["* * * * *", "notifications.cron.runtick"]  # runs the checks itself
    # `crontab run` leaves the checks to runtick; not mailed to the local user every minute
    assert job[2] == f"--skip-checks >> {REPO / 'runtick.log'} 2>&1"

    (job,) = project_settings(TICK_LOG=str(tmp_path / "tick log"))["cronjobs"]
    assert job[2] == f"--skip-checks >> '{tmp_path / 'tick log'}' 2>&1"


def test_the_cron_interval_is_still_read_from_the_job():
    from django.test import override_settings

    from notifications.checks.scheduler import cron_interval

    job = ("*/5 * * * *", "django.core.management.call_command", ["runtick"], {}, ">> /tmp/tick.log 2>&1")
    with override_settings(CRONJOBS=[job]):
        assert cron_interval() == 300
    job = ("*/2 * * * *", "notifications.cron.runtick", "--skip-checks >> /tmp/tick.log 2>&1")
    with override_settings(CRONJOBS=[job]):
        assert cron_interval() == 120


def test_the_favicon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an icon file
