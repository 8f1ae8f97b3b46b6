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

from notifications.models import DeliveryAttempt, InboxMessage, Notification
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
    demo_user = authenticate(username="demo", password="first-run-pw")
    assert demo_user.is_superuser

    # The demo login's inbox: the page with the bell is printed, and the welcome arrived once.
    assert re.search(r"^  Inbox:   http://127\.0\.0\.1:8123/demo/ ", output, re.MULTILINE)
    welcome = InboxMessage.objects.filter(recipient=f"user:{demo_user.pk}", title="Welcome to your inbox")
    assert welcome.count() == 1

    # The one-shot email went out (console backend) and its row is gone.
    assert "Subject: Welcome to the queue, newcomer" in output
    assert not Notification.objects.filter(email_to="newcomer@example.com").exists()

    # The recurring webhook reached the local sink, signed, and waits for its next minute.
    assert re.search(r"sink <- POST /hooks/ok webhook-id=msg_\S+ signature=valid .* -> 200", output)
    recurring = Notification.objects.get(payload__demo="recurring webhook")
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


def test_the_demo_shows_one_escalation_that_fires_and_one_cancelled_by_reading(demo):
    """With `--interval 1` the escalations wait 3 s: the unread one goes to the sink's
    webhook once; the demo reads the other's message as it arrives, so it is never sent."""
    proc, lines = demo
    fires = int(wait_for_line(proc, lines, r"^  #(\d+)  escalation that fires: ")[1])
    read = int(wait_for_line(proc, lines, r"^  #(\d+)  escalation cancelled by reading: ")[1])
    wait_for_line(proc, lines, rf"^read: the demo login read #{read}'s inbox message before its deadline$")
    wait_for_line(
        proc, lines, rf"^escalation cancelled: #{read} was never sent \(cancelled: read, in the delivery log\)$"
    )
    wait_for_line(proc, lines, rf"^escalated: #{fires}'s inbox message was still unread at its deadline, so the "
                  r"escalation went out through webhook")  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    output = "\n".join(lines)

    # Both messages are in the demo login's inbox, once each: one unread, one read in time.
    demo_user = authenticate(username="demo", password="first-run-pw")
    unread = InboxMessage.objects.get(notification_id=fires)
    read_in_time = InboxMessage.objects.get(notification_id=read)
    assert unread.recipient == read_in_time.recipient == f"user:{demo_user.pk}"
    assert unread.read_at is None and read_in_time.read_at is not None

    # The sink got the unread one's escalation, signed, once; never the other's.
    escalated = re.findall(r"sink <- POST /hooks/ok/escalation webhook-id=msg_\S+ signature=valid (.*) -> 200", output)
    assert len(escalated) == 1 and '"demo": "escalation that fires"' in escalated[0]
    assert "escalation cancelled by reading" not in " ".join(escalated)
    log = DeliveryAttempt.objects.order_by("attempted_at", "id")
    assert [(a.channel, a.outcome) for a in log.filter(notification_id=fires)] == [("inbox", "ok"), ("webhook", "ok")]
    assert [(a.channel, a.outcome, a.summary) for a in log.filter(notification_id=read)] == [
        ("inbox", "ok", read_in_time.title),
        ("webhook", "cancelled", "cancelled: read"),
    ]
    assert not Notification.objects.filter(pk__in=[fires, read]).exists()
