"""`manage.py demo`: the first run. A login, sample notifications, a local webhook sink, the tick.

Part of the demo project, not of the app: it never ships in the wheel. Everything it
loosens (webhooks to loopback, short retry delays) is overridden in this process only;
the project's settings, and so production defaults, stay as they are. (They open
loopback themselves only with DEBUG on the demo database, as `.env` from `make run`
has it, so a `manage.py runtick` after the demo treats its rows as the demo did.)
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import django
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import schedule
from notifications.conf import app_settings
from notifications.models import Notification, addresses
from notifications.signals import notification_dead_lettered
from notifications.testing import CapturedWebhook

LOOPBACK = "127.0.0.0/8"
DEMO_USER = "demo"


class Sink:
    """A local webhook receiver: /hooks/ok answers 200, any other path 503. Prints what arrives."""

    def __init__(self, write: Any, port: int = 0) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # the sink prints its own lines
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                hook = CapturedWebhook(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                status = 200 if self.path.startswith("/hooks/ok") else 503
                signature = "valid" if hook.verify() else "INVALID"
                write(
                    f"sink <- POST {self.path} webhook-id={hook.message_id} signature={signature} "
                    f"payload={json.dumps(hook.payload)} -> {status}"
                )
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="demo-sink", daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# A tick's summary line when it claimed nothing: `2025-06-02T12:00:10+00:00 claimed=0 ...`.
IDLE_SUMMARY = re.compile(r"^(?P<stamp>\S+) claimed=0 ")


class IdleTicks:
    """The loop's output with each stretch of idle ticks said once (`idle since 12:00:10`):
    a `claimed=0` line every interval would bury what the demo shows."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.idle = False

    def write(self, text: str) -> None:
        found = IDLE_SUMMARY.match(text)
        if found is None:
            if re.match(r"^\S+ claimed=", text):
                self.idle = False  # a tick that did something: the next idle one is said again
            self.out.write(text.rstrip("\n"))
            return
        if not self.idle:
            self.idle = True
            since = found["stamp"][11:19]  # HH:MM:SS of the ISO stamp
            self.out.write(f"{found['stamp']} idle since {since}: nothing due (said again once a tick claims rows)")

    def flush(self) -> None:
        self.out.flush()


def attempts(row: Notification) -> str:
    return "1 attempt" if row.error_count == 1 else f"{row.error_count} attempts"


def what(row: Notification) -> str:
    """The row in words: the demo's name for it, and where it sends."""
    name = row.payload.get("demo") if isinstance(row.payload, dict) else None
    targets = [
        f"email to {', '.join(addresses.as_list(row.email_to))}"
        if channel == "email"
        else f"webhook to {row.webhook_url}"
        for channel in row.channel_list
    ]
    return f"the {name} ({', '.join(targets)})" if name else ", ".join(targets)


class Command(BaseCommand):
    help = "First run: migrate, a demo login, sample notifications, a local webhook sink, and the tick looping."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--admin-url", default="http://127.0.0.1:8000/admin/", help="where runserver serves")
        parser.add_argument("--interval", type=float, default=10.0, help="seconds between ticks (default 10)")
        parser.add_argument("--sink-port", type=int, default=0, help="port of the local webhook sink (default: any)")
        parser.add_argument("--password", help="the demo login's password (default: a fresh random one)")

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"]
        admin_url = options["admin_url"].rstrip("/") + "/"
        call_command("migrate", interactive=False, verbosity=0)
        password = options["password"] or secrets.token_urlsafe(12)
        self.make_login(password)

        # Demo-only: webhooks may reach the local sink, and the failing sample walks to the
        # dead letters in a few ticks instead of the default 1 + 5 minutes.
        demo_settings = {
            "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS": [*app_settings.WEBHOOK_ALLOWED_NETWORKS, LOOPBACK],
            "NOTIFICATIONS_MAX_RETRIES": 3,
            "NOTIFICATIONS_BACKOFF": [interval, 2 * interval],
        }
        if django.VERSION >= (6, 0):  # Django's tasks through the queue (docs/tasks.md)
            demo_settings["TASKS"] = {"default": {"BACKEND": "notifications.tasks.QueueBackend"}}
        with Sink(self.say, options["sink_port"]) as sink, override_settings(**demo_settings):
            rows = self.schedule_samples(sink)
            self.print_welcome(admin_url, password, sink, rows, interval)
            self.enqueue_sample_task()

            def announce_dead_letter(sender: Any, notification: Notification, **kwargs: Any) -> None:
                self.say(
                    f"dead letter: #{notification.pk} ({notification.last_error}) after "
                    f"{attempts(notification)}: {what(notification)}; "
                    f"requeue or purge it at {admin_url}notifications/notification/?state=dead"
                )

            notification_dead_lettered.connect(announce_dead_letter, weak=False)
            try:
                # until Ctrl-C / SIGTERM; a stretch of idle ticks is said once, not every interval
                call_command("runtick", loop=interval, verbosity=2, stdout=IdleTicks(self.stdout))
            finally:
                notification_dead_lettered.disconnect(announce_dead_letter)
        self.say("demo stopped")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def make_login(self, password: str) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USER).first() or user_model(username=DEMO_USER)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()

    def schedule_samples(self, sink: Sink) -> dict[str, Notification]:
        """Four rows that show the ways out: delivered, recurring, partly delivered, dead-lettered."""
        Notification.objects.filter(payload__has_key="demo").delete()  # the previous run's samples
        now = timezone.now()
        return {
            "email": schedule(
                channels=["email"],
                email_to="newcomer@example.com",
                subject="Welcome to the queue, {{ name }}",
                body="This email was a row in the database a moment ago; the tick sent it and deleted the row.",
                payload={"demo": "one-shot email", "name": "newcomer"},
                fire_at=now,
            ),
            "recurring": schedule(
                channels=["webhook"],
                webhook_url=sink.url("/hooks/ok"),
                recurrence_rule="* * * * *",
                payload={"demo": "recurring webhook", "every": "minute"},
                fire_at=now,
            ),
            "partial": schedule(
                channels=["email", "webhook"],
                email_to="operator@example.com",
                subject="Half of this reminder arrives",
                body="The email goes out; the webhook beside it gets a 503, so the row is a partial failure.",
                webhook_url=sink.url("/hooks/unavailable"),
                payload={"demo": "partial failure"},
                fire_at=now,
            ),
            "failing": schedule(
                channels=["webhook"],
                webhook_url=sink.url("/hooks/broken"),
                payload={"demo": "failing webhook"},
                fire_at=now,
            ),
        }

    def enqueue_sample_task(self) -> None:
        """One `django.tasks` task, run by the first tick beside the notifications (Django 6.0+)."""
        if django.VERSION < (6, 0):
            return
        from django.tasks.signals import task_finished

        from notifications_project.tasks import count_waiting

        def announce(sender: Any, task_result: Any, **kwargs: Any) -> None:
            value = task_result.return_value if task_result.status == "SUCCESSFUL" else task_result.errors
            self.say(f"task {task_result.id} ({task_result.task.module_path}): {task_result.status}, {value!r}")

        task_finished.connect(announce, weak=False)
        result = count_waiting.enqueue()
        self.say(f"Task enqueued: {result.id} ({result.task.module_path}), run by the first tick")

    def print_welcome(
        self, admin_url: str, password: str, sink: Sink, rows: dict[str, Notification], interval: float
    ) -> None:
        self.say(
            "\n".join(
                [
                    "",
                    "Demo ready.",
                    f"  Admin:   {admin_url}notifications/notification/",
                    f"  Login:   {DEMO_USER} / {password}",
                    f"  Sink:    {sink.url('/hooks/')}  (a local webhook receiver; its lines start with 'sink <-')",
                    "Sample notifications:",
                    f"  #{rows['email'].pk}  one-shot email to newcomer@example.com (printed below by the console "
                    "email backend)",
                    f"  #{rows['recurring'].pk}  recurring webhook, every minute, to {sink.url('/hooks/ok')}",
                    f"  #{rows['partial'].pk}  email (delivered) and webhook to {sink.url('/hooks/unavailable')} "
                    "(503): a partial failure, kept for a requeue of the webhook alone "
                    f"({admin_url}notifications/notification/?state=partial)",
                    f"  #{rows['failing'].pk}  webhook to {sink.url('/hooks/broken')}, which answers 503: retried "
                    f"after {interval:g}s and {2 * interval:g}s, then dead-lettered",
                    f"Ticking every {interval:g}s; Ctrl-C stops. Demo-only (this process): webhooks may reach "
                    f"{LOOPBACK}, retries come after {interval:g}s and {2 * interval:g}s.",
                    "",
                ]
            )
        )
