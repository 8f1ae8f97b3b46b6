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

from notifications import inbox
from notifications.api import schedule
from notifications.conf import app_settings
from notifications.models import DeliveryAttempt, InboxMessage, Notification, addresses
from notifications.signals import notification_dead_lettered, notification_delivered
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

    def __init__(self, out: Any, after_tick: Any = None) -> None:
        self.out = out
        self.idle = False
        self.after_tick = after_tick  # called after each tick's summary line

    def write(self, text: str) -> None:
        self._write(text)
        if self.after_tick is not None and re.match(r"^\S+ (claimed=|idle since)", text):
            self.after_tick()

    def _write(self, text: str) -> None:
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


def escalation_delay(interval: float) -> int:
    """Seconds the demo's escalations wait for a read: three ticks."""
    return max(1, round(3 * interval))


class Escalations:
    """Says what becomes of the demo's two escalations: the unread one fires, the other is
    read by the demo login as soon as its message arrives and so is cancelled."""

    def __init__(self, say: Any, fires: Notification, read: Notification) -> None:
        self.say = say
        self.fires = fires.pk
        self.read = read.pk
        self.cancelled_said = False

    def delivered(self, sender: Any, notification: Notification, results: Any, **kwargs: Any) -> None:
        channels = {result.channel for result in results}
        if notification.pk == self.fires and "inbox" not in channels:
            self.say(
                f"escalated: #{self.fires}'s inbox message was still unread at its deadline, so the escalation "
                f"went out through {', '.join(sorted(channels))} (the sink's line above)"
            )
        elif notification.pk == self.read and "inbox" in channels:
            ids = list(
                InboxMessage.objects.filter(
                    notification_id=self.read, firing_id=notification.escalation_of
                ).values_list("pk", flat=True)
            )
            inbox.mark(notification.recipient, ids, "read")
            self.say(f"read: the demo login read #{self.read}'s inbox message before its deadline")

    def after_tick(self) -> None:
        if self.cancelled_said:
            return
        cancelled = DeliveryAttempt.objects.filter(
            notification_id=self.read, outcome=DeliveryAttempt.AttemptOutcome.CANCELLED
        )
        found = cancelled.first()
        if found is not None:
            self.cancelled_said = True
            self.say(f"escalation cancelled: #{self.read} was never sent ({found.summary}, in the delivery log)")


def attempts(row: Notification) -> str:
    return "1 attempt" if row.error_count == 1 else f"{row.error_count} attempts"


def what(row: Notification) -> str:
    """The row in words: the demo's name for it, and where it sends."""
    name = row.payload.get("demo") if isinstance(row.payload, dict) else None
    targets = [_target(row, channel) for channel in row.channel_list]
    return f"the {name} ({', '.join(targets)})" if name else ", ".join(targets)


def _target(row: Notification, channel: str) -> str:
    if channel == "email":
        return f"email to {', '.join(addresses.as_list(row.email_to))}"
    if channel == "inbox":
        return f"the inbox of {row.recipient}"
    return f"webhook to {row.webhook_url}"


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
        demo_user = self.make_login(password)

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
            rows = self.schedule_samples(
                sink, recipient=f"user:{demo_user.pk}", escalate_after=escalation_delay(interval)
            )
            self.print_welcome(admin_url, password, sink, rows, interval)
            self.enqueue_sample_task()

            def announce_dead_letter(sender: Any, notification: Notification, **kwargs: Any) -> None:
                self.say(
                    f"dead letter: #{notification.pk} ({notification.last_error}) after "
                    f"{attempts(notification)}: {what(notification)}; "
                    f"requeue or purge it at {admin_url}notifications/notification/?state=dead"
                )

            notification_dead_lettered.connect(announce_dead_letter, weak=False)
            escalations = Escalations(self.say, rows["escalates"], rows["read in time"])
            notification_delivered.connect(escalations.delivered, weak=False)
            try:
                # until Ctrl-C / SIGTERM; a stretch of idle ticks is said once, not every interval
                out = IdleTicks(self.stdout, after_tick=escalations.after_tick)
                call_command("runtick", loop=interval, verbosity=2, stdout=out)
            finally:
                notification_dead_lettered.disconnect(announce_dead_letter)
                notification_delivered.disconnect(escalations.delivered)
        self.say("demo stopped")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def make_login(self, password: str) -> Any:
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USER).first() or user_model(username=DEMO_USER)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        return user

    def schedule_samples(self, sink: Sink, recipient: str, escalate_after: int) -> dict[str, Notification]:
        """Rows that show the ways out: delivered, recurring, partly delivered, dead-lettered,
        and the demo login's inbox: a welcome at once, a message every minute, and two
        escalations (`escalate_after` seconds): one left unread, one read in time."""
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
            "welcome": schedule(
                channels=["inbox"],
                recipient=recipient,
                subject="Welcome to your inbox",
                body="This message was a row in the database; the tick put it in your inbox.",
                channel_data={"inbox": {"url": "/admin/notifications/notification/"}},
                payload={"demo": "inbox welcome"},
                fire_at=now,
            ),
            "minutely": schedule(
                channels=["inbox"],
                recipient=recipient,
                subject="Another minute, another message",
                body="A recurring row delivers one message to the inbox each minute; the bell counts it.",
                recurrence_rule="* * * * *",
                payload={"demo": "recurring inbox message"},
                fire_at=now,
            ),
            # Two escalations: the inbox message first, then the webhook unless it is read in time.
            "escalates": schedule(
                channels=["inbox"],
                recipient=recipient,
                subject="Your invoice is due (left unread: escalates)",
                body="Nobody reads this one: at its deadline the escalation goes to the webhook sink.",
                webhook_url=sink.url("/hooks/ok/escalation"),
                escalate_after=escalate_after,
                escalate_to=["webhook"],
                payload={"demo": "escalation that fires"},
                fire_at=now,
            ),
            "read in time": schedule(
                channels=["inbox"],
                recipient=recipient,
                subject="Your parcel arrives today (read in time: no escalation)",
                body="The demo reads this one as soon as it arrives, so its escalation is cancelled.",
                webhook_url=sink.url("/hooks/ok/escalation"),
                escalate_after=escalate_after,
                escalate_to=["webhook"],
                payload={"demo": "escalation cancelled by reading"},
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
        site_url = admin_url.removesuffix("admin/")  # the demo site's own pages beside the admin
        self.say(
            "\n".join(
                [
                    "",
                    "Demo ready.",
                    f"  Admin:   {admin_url}notifications/notification/",
                    f"  Login:   {DEMO_USER} / {password}",
                    f"  Inbox:   {site_url}demo/  (the bell counts {DEMO_USER}'s unread messages; "
                    f"#{rows['welcome'].pk} arrives now, #{rows['minutely'].pk} every minute; the inbox: "
                    f"{site_url}notifications/inbox/)",
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
                    f"  #{rows['escalates'].pk}  escalation that fires: an inbox message left unread; after "
                    f"{escalation_delay(interval)}s it escalates to the webhook sink",
                    f"  #{rows['read in time'].pk}  escalation cancelled by reading: the demo reads its inbox message "
                    "as it arrives (as the inbox page's Mark read does), so the escalation is never sent "
                    f"({admin_url}notifications/deliveryattempt/ records it as 'cancelled: read')",
                    f"Ticking every {interval:g}s; Ctrl-C stops. Demo-only (this process): webhooks may reach "
                    f"{LOOPBACK}, retries come after {interval:g}s and {2 * interval:g}s.",
                    "",
                ]
            )
        )
