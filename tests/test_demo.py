"""`manage.py demo`, the first run `make run` gives a newcomer: a login, samples, a sink, the tick."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import django
import pytest
from django.conf import settings
from django.contrib.auth import authenticate

from notifications.models import Notification
from tests.support.processes import REPO, child_env

pytestmark = pytest.mark.slow


@pytest.fixture
def demo(transactional_db):
    """Start the demo against the test database; yields (process, lines read so far)."""
    extra = {
        "INSTALLED_APPS": [*settings.INSTALLED_APPS, "notifications_project"],
        "EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
        # Like a production site: loopback is closed; the demo must open it for itself.
        "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS": [],
    }
    command = [sys.executable, "manage.py", "demo", "--settings=tests.child_settings", "--interval", "1"]
    command += ["--password", "first-run-pw", "--admin-url", "http://127.0.0.1:8123/admin"]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=child_env(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    yield proc, lines
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def wait_for_line(proc, lines, pattern: str, timeout: float = 60, start: int = 0) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
        for line in list(lines)[start:]:
            if found := re.search(pattern, line):
                return found
        assert proc.poll() is None, "demo exited early:\n" + "\n".join(lines)
        assert time.monotonic() < deadline, f"no line matching {pattern!r} within {timeout}s:\n" + "\n".join(lines)
        time.sleep(0.05)


def test_the_demo_shows_delivery_a_partial_failure_a_retry_and_a_dead_letter(demo):
    proc, lines = demo

    wait_for_line(
        proc, lines, r"^dead letter: #\d+ \(webhook: HTTP 503\) after 3 attempts: .*; requeue or purge it at "
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    output = "\n".join(lines)

    # What the newcomer reads first: where the admin is and how to log in.
    assert "  Admin:   http://127.0.0.1:8123/admin/notifications/notification/" in output
    assert "  Login:   demo / first-run-pw" in output
    assert authenticate(username="demo", password="first-run-pw").is_superuser

    # The one-shot email went out (console backend) and its row is gone.
    assert "Subject: Welcome to the queue, newcomer" in output
    assert not Notification.objects.filter(email_to="newcomer@example.com").exists()

    # The recurring webhook reached the local sink, signed, and waits for its next minute.
    assert re.search(r"sink <- POST /hooks/ok webhook-id=msg_\S+ signature=valid .* -> 200", output)
    recurring = Notification.objects.get(recurrence_rule="* * * * *")
    assert recurring.last_error is None
    assert recurring.last_fired_at is not None

    # The partial failure: its email went out (console backend), its webhook got a 503, and the
    # row waits in the partial filter for a requeue of the webhook alone.
    assert "Subject: Half of this reminder arrives" in output
    assert re.search(r"sink <- POST /hooks/unavailable webhook-id=msg_\S+ signature=valid .* -> 503", output)
    partial = Notification.objects.get(webhook_url__endswith="/hooks/unavailable")
    assert partial.state() == "partial"
    assert partial.last_error == "partial: webhook"
    assert "http://127.0.0.1:8123/admin/notifications/notification/?state=partial" in output

    # The failing one: two retries, then a dead letter, with the admin link to it.
    assert output.count("retried: retry in") == 2
    failing = Notification.objects.get(webhook_url__endswith="/hooks/broken")
    assert failing.dead_lettered_at is not None
    assert failing.last_error == "webhook: HTTP 503"
    assert (
        f"dead letter: #{failing.pk} (webhook: HTTP 503) after 3 attempts: the failing webhook (webhook to " in output
    )
    assert "http://127.0.0.1:8123/admin/notifications/notification/?state=dead" in output
    assert output.rstrip().endswith("demo stopped")


def test_idle_ticks_are_said_once_not_every_interval(demo):
    """After the samples settle, the loop's ticks claim nothing until the recurring row's
    next minute: one `idle since` line for the stretch, no `claimed=0` line per tick."""
    from notifications.models import TickRun

    proc, lines = demo
    wait_for_line(proc, lines, r"^dead letter: #\d+ ")
    settled = len(lines)
    idle = wait_for_line(proc, lines, start=settled, pattern=r"^\S+ idle since (\d\d:\d\d:\d\d): nothing due")
    ticks = TickRun.objects.count()
    deadline = time.monotonic() + 60
    while TickRun.objects.count() < ticks + 4:  # idle ticks, one a second, unsaid
        assert time.monotonic() < deadline, f"the loop stopped ticking: {TickRun.objects.count()} ticks"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0

    assert not [line for line in lines if " claimed=0 " in line]
    stretches = [line for line in lines[settled:] if " idle since " in line]
    # One line per stretch: the recurring row's minute may end one and start another.
    assert 1 <= len(stretches) <= 2 and idle[0] in stretches[0], stretches


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6.0+: this is Django 5.2")
def test_the_demo_enqueues_a_task_the_first_tick_runs(demo):
    proc, lines = demo
    enqueued = wait_for_line(proc, lines, r"^Task enqueued: (\S+) \(notifications_project\.tasks\.count_waiting\)")
    path = r"\(notifications_project\.tasks\.count_waiting\)"
    wait_for_line(proc, lines, rf"^task {enqueued[1]} {path}: SUCCESSFUL, \d+$")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
