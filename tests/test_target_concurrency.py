"""NOTIFICATIONS_TARGET_CONCURRENCY: a burst to one receiver never has more sends in flight
(or connections open) than the cap, while a burst over several receivers uses every worker.

The receivers are real loopback servers that count, from their side, the connections open
at once and the requests being answered at once, holding each request briefly so that
sends overlap.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings
from django.utils import timezone

from notifications.api import run_tick
from notifications.flow.targets import dispatch_target, targets_of
from notifications.models import Notification
from notifications.tick.dispatch import Batch, Dispatcher, Job
from notifications.tick.engine import Tick
from notifications.tick.pipeline import Pipeline, claim_size

HOLD = 0.05  # seconds each request is held before its answer
CAP = 4
WORKERS = 16  # more than the cap, and the reserved-worker cap (12) is above it too


class Peaks:
    """Gauges and their peaks, shared by several receivers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    def up(self, *names: str) -> None:
        with self._lock:
            for name in names:
                self.now[name] += 1
                self.peak[name] = max(self.peak[name], self.now[name])

    def down(self, *names: str) -> None:
        with self._lock:
            for name in names:
                self.now[name] -= 1


class CountingReceiver:
    """A threaded loopback server: counts connections open and requests in flight (its own and
    the total over every receiver sharing `peaks`), and the `webhook-id`s it answered."""

    def __init__(self, peaks: Peaks) -> None:
        self.ids: Counter[str] = Counter()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                peaks.up(f"{receiver.port} connections", "connections")

            def finish(self):
                peaks.down(f"{receiver.port} connections", "connections")
                super().finish()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                peaks.up(f"{receiver.port} in flight", "in flight")
                try:
                    time.sleep(HOLD)
                    with peaks._lock:
                        receiver.ids[self.headers.get("webhook-id", "")] += 1
                finally:
                    peaks.down(f"{receiver.port} in flight", "in flight")
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(ThreadingHTTPServer):
            request_queue_size = 256
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receivers():
    peaks = Peaks()
    made: list[CountingReceiver] = []

    def make(n: int) -> tuple[list[CountingReceiver], Peaks]:
        made.extend(CountingReceiver(peaks) for _ in range(n))
        return made[-n:], peaks

    yield make
    for receiver in made:
        receiver.close()


def burst(make_row, urls: list[str], rows: int) -> None:
    due = timezone.now() - timedelta(seconds=1)
    for i in range(rows):
        make_row(channels=["webhook"], webhook_url=urls[i % len(urls)], fire_at=due)


@override_settings(NOTIFICATIONS_CONCURRENCY=WORKERS, NOTIFICATIONS_TARGET_CONCURRENCY=CAP)
def test_a_burst_to_one_receiver_never_has_more_than_the_cap_in_flight(make_row, receivers):
    (receiver,), peaks = receivers(1)
    burst(make_row, [receiver.url()], 60)

    report = run_tick()

    assert report.counts()["succeeded"] == 60
    assert peaks.peak["in flight"] == CAP  # the cap is reached, never passed
    assert peaks.peak["connections"] <= CAP  # pooled connections too: none beyond the cap, idle or busy
    assert len(receiver.ids) == 60 and max(receiver.ids.values()) == 1  # each row once
    assert not Notification.objects.exists()


@override_settings(NOTIFICATIONS_CONCURRENCY=WORKERS, NOTIFICATIONS_TARGET_CONCURRENCY=CAP)
def test_a_burst_over_several_receivers_uses_more_than_the_cap_in_all(make_row, receivers):
    several, peaks = receivers(4)
    burst(make_row, [r.url() for r in several], 60)

    report = run_tick()

    assert report.counts()["succeeded"] == 60
    assert peaks.peak["in flight"] > CAP  # the workers are not held to one target's cap...
    for receiver in several:  # ...while each receiver is
        assert peaks.peak[f"{receiver.port} in flight"] <= CAP
        assert peaks.peak[f"{receiver.port} connections"] <= CAP
        assert len(receiver.ids) == 15 and max(receiver.ids.values()) == 1


# --- the parts: where a row goes, what a worker may take, how much a tick claims ----------


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("https://Hooks.Example.com/in", "hooks.example.com"),
        ("https://hooks.example.com:443/in", "hooks.example.com"),
        ("http://hooks.example.com:80/in", "hooks.example.com"),
        ("http://127.0.0.1:8081/in", "127.0.0.1:8081"),
        ("https://hooks.example.com:80/in", "hooks.example.com:80"),
        ("http://[::1]:8081/in", "[::1]:8081"),
        ("http://host:99999/in", ""),  # unusable: the channel refuses it without a connection
    ],
)
def test_a_webhook_target_is_the_host_with_a_port_other_than_the_default(url, target):
    assert dispatch_target(Notification(webhook_url=url, channels=["webhook"])) == target


def test_a_row_without_a_webhook_goes_to_the_email_target():
    assert dispatch_target(Notification(channels=["email"], email_to="ada@example.com")) == "email"


def test_an_email_only_row_with_a_webhook_url_is_queued_limited_and_held_as_email():
    """One definition of a row's targets: the dispatcher, the rate limits and the breaker agree.

    An email-only row that happens to carry a `webhook_url` used to be queued and capped
    under the webhook's host while flow control limited it as `email`."""
    row = Notification(channels=["email"], email_to="ada@example.com", webhook_url="https://hooks.example.com/in")
    assert dispatch_target(row) == "email"
    assert targets_of(row) == ["email"]


def test_a_row_owing_only_its_email_after_a_partial_failure_waits_on_email():
    row = Notification(
        channels=["email", "webhook"],
        email_to="ada@example.com",
        webhook_url="https://hooks.example.com/in",
        pending_channels=["email"],
    )
    assert dispatch_target(row) == "email" and targets_of(row) == ["email"]
    row.pending_channels = []
    assert dispatch_target(row) == "hooks.example.com" and targets_of(row) == ["email", "hooks.example.com"]


def jobs(target: str, n: int) -> list[Job]:
    batch = Batch(token=uuid.uuid4(), now=timezone.now(), left=n)
    return [Job(batch, Notification(), target) for _ in range(n)]


def test_a_target_at_its_cap_is_skipped_for_the_next():
    dispatcher = Dispatcher(workers=16, target_cap=2)
    dispatcher.put(jobs("a", 5) + jobs("b", 1))

    taken = [dispatcher.take() for _ in range(3)]

    assert Counter(job.target for job in taken) == {"a": 2, "b": 1}
    assert dispatcher.starved()  # workers are free, rows wait, their target is at its cap
    dispatcher.done(taken[0])  # one of a's finishes: a may start another
    assert dispatcher.take().target == "a"


def test_the_reserved_worker_cap_applies_below_the_target_cap_and_lifts_to_it():
    dispatcher = Dispatcher(workers=4, target_cap=16)  # 3 of 4 workers for one target while claiming
    dispatcher.put(jobs("a", 10))
    assert [dispatcher.take().target for _ in range(3)] == ["a"] * 3
    assert dispatcher.starved()

    dispatcher.set_capped(False)  # nothing more to claim: the fourth worker may help, up to the target cap

    assert dispatcher.take().target == "a"


def test_the_rows_held_say_how_many_workers_they_can_use_and_which_target_has_most():
    dispatcher = Dispatcher(workers=16, target_cap=4)
    dispatcher.put(jobs("a", 10) + jobs("b", 2) + jobs("c", 1))

    assert dispatcher.useful_workers() == 4 + 2 + 1
    assert dispatcher.busiest() == 10
    finished = dispatcher.take()
    dispatcher.done(finished)
    assert dispatcher.busiest() == (9 if finished.target == "a" else 10)


@override_settings(NOTIFICATIONS_CONCURRENCY=256, NOTIFICATIONS_TARGET_CONCURRENCY=16, NOTIFICATIONS_CHANNEL_TIMEOUT=10)
def test_a_claim_never_holds_more_for_one_target_than_it_can_finish_in_the_budget():
    """Were every row of a claim for one stuck target, it would drain within the budget."""
    settings = Tick(limit=100, budget=50).settings  # 5 deadlines: 16 x 5 = 80 rows per target, 256 x 5 in all

    assert claim_size(settings, 0, in_hand=0, busiest=0) == 80
    assert claim_size(settings, 0, in_hand=80, busiest=80) == 0
    assert claim_size(settings, 0, in_hand=400, busiest=10) == 70
    assert claim_size(settings, 0, in_hand=1250, busiest=1) == 30  # the total bound
    assert claim_size(settings, 45, in_hand=0, busiest=0) == 16  # the last deadline's worth


@override_settings(NOTIFICATIONS_CONCURRENCY=WORKERS, NOTIFICATIONS_TARGET_CONCURRENCY=CAP)
def test_a_tick_starts_only_the_threads_its_rows_can_use(make_row, receivers, monkeypatch):
    (receiver,), _ = receivers(1)
    burst(make_row, [receiver.url()], 10)
    started = []
    original = Pipeline.start_worker

    def counted(self):
        started.append(1)
        original(self)

    monkeypatch.setattr(Pipeline, "start_worker", counted)

    run_tick()

    assert len(started) == CAP  # one target: CAP threads, not CONCURRENCY


@override_settings(NOTIFICATIONS_RATE_LIMITS={"webhook": "100/s"})
def test_a_firing_works_out_its_target_once_and_logs_it(make_row, webhook_server, monkeypatch):
    """The tick works out a row's target once and carries it: the recipients' screen, the
    breaker, the rate limit, the dispatcher, the delivery log and the totals all use it."""
    from notifications.channels.webhook.channel import WebhookChannel
    from notifications.models import DeliveryAttempt, Tally
    from tests.support.servers import Reply

    webhook_server.reply = Reply(status=500)  # a failure: the breaker counts it, the row is retried
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url("/hook"))
    target = f"127.0.0.1:{webhook_server.port}"
    worked_out = []
    real = WebhookChannel.target

    def counted(self, row):
        worked_out.append(row.pk)
        return real(self, row)

    monkeypatch.setattr(WebhookChannel, "target", counted)

    assert run_tick().counts()["retried"] == 1

    assert worked_out == [row.pk]
    assert list(DeliveryAttempt.objects.values_list("target", flat=True)) == [target]
    assert Tally.objects.filter(kind=Tally.Kind.DELIVERY, channel="webhook", target=target, outcome="failed").exists()
