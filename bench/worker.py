"""One measured job in its own process: `python -m bench.worker JOB '{json args}'`.

Django starts before the clock does, so each figure is the job alone. Prints one
JSON line: wall-clock start and end (for jobs run side by side), seconds, peak RSS.
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")


def _rss_kb(field: str = "VmRSS") -> int:
    """This process's resident memory now (VmRSS) or at its peak (VmHWM), in KB.

    The peak is VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over an exec,
    so a child started by a big parent would report the parent's size.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def instrumentation(variant: str) -> None:
    """Set up the instrumentation variant of a runtick job (the instrumentation scenario):
    `bare` without the monitoring totals' writes, `product` as shipped (totals, OpenTelemetry
    API without an SDK), `otel` with the OpenTelemetry SDK recording every span and metric
    (spans batched to an exporter that drops them, metrics read in memory)."""
    if variant == "bare":
        from notifications.store import tallies

        tallies.add_deliveries = lambda counts: None  # type: ignore[assignment]
        tallies.add_tick = lambda seconds: None  # type: ignore[assignment]
    elif variant == "otel":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        from notifications import otel

        class Drop(SpanExporter):
            def export(self, spans):  # type: ignore[no-untyped-def]
                return SpanExportResult.SUCCESS

        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
        otel.configure(
            tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()])
        )


def runtick(args: dict) -> dict:
    """`manage.py runtick`, as cron runs it (`instrumentation`: see `instrumentation()`)."""
    from django.core.management import call_command

    instrumentation(args.pop("instrumentation", "product"))
    out = io.StringIO()
    before = _rss_kb()
    start = time.time()
    call_command("runtick", stdout=out, **args)
    end = time.time()
    return {"start": start, "end": end, "summary": out.getvalue().strip(), "rss_before_kb": before}


def post_office(args: dict) -> dict:
    """django-post-office's `send_queued_mail`, its documented cron command."""
    from django.core.management import call_command

    before = _rss_kb()
    start = time.time()
    call_command("send_queued_mail", lockfile=args["lockfile"], processes=1)
    end = time.time()
    return {"start": start, "end": end, "rss_before_kb": before}


def _signed_posts(args: dict, urls: list[str]) -> list[tuple[str, bytes, dict]]:
    """(url, body, headers) of each of `args["rows"]` webhooks, signed as the channel signs
    them, spread over `urls` in turn: what the plain clients below post."""
    import uuid

    from django.utils import timezone

    from notifications.channels import Firing
    from notifications.channels.webhook.channel import body, message_id
    from notifications.conf import app_settings
    from notifications.models import Notification
    from notifications.rules import signing

    keys = [signing.secret_key(s) for s in app_settings.webhook_secrets]
    fired_at = timezone.now()
    posts = []
    for pk in range(1, args["rows"] + 1):
        url = urls[pk % len(urls)]
        row = Notification(pk=pk, channels=["webhook"], webhook_url=url, payload=args["payload"])
        firing = Firing(row, str(uuid.uuid4()), fired_at, ["webhook"])
        data = body(firing)
        headers = signing.headers(keys, message_id(firing), int(fired_at.timestamp()), data)
        headers["content-type"] = "application/json"
        posts.append((url, data, headers))
    return posts


def plain_requests(args: dict) -> dict:
    """The limit: plain requests posting the same signed bodies, no database, no engine."""
    import threading

    import requests

    jobs = [(data, headers) for _, data, headers in _signed_posts(args, [args["url"]])]
    local = threading.local()

    def post(job: tuple[bytes, dict]) -> int:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        response = session.post(args["url"], data=job[0], headers=job[1], timeout=10)
        return response.status_code

    before = _rss_kb()
    start = time.time()
    with ThreadPoolExecutor(args["concurrency"]) as pool:
        statuses = list(pool.map(post, jobs, chunksize=16))
    end = time.time()
    return {"start": start, "end": end, "ok": sum(1 for s in statuses if s == 200), "rss_before_kb": before}


def plain_adapter(args: dict) -> dict:
    """The limit at latency: prepared requests sent through one `HTTPAdapter.send` (no Session),
    the same signed bodies, `concurrency` threads, to the given URLs in turn. No database."""
    import requests
    from requests.adapters import HTTPAdapter

    urls = args["urls"]
    prepared = [
        requests.Request("POST", url, data=data, headers=headers).prepare()
        for url, data, headers in _signed_posts(args, urls)
    ]
    # One adapter for every thread, pooling as many connections per host as there are threads.
    adapter = HTTPAdapter(pool_connections=len(urls), pool_maxsize=args["concurrency"], max_retries=0)

    def send(request: requests.PreparedRequest) -> int:
        response = adapter.send(request, timeout=10)
        return response.status_code

    before = _rss_kb()
    start = time.time()
    with ThreadPoolExecutor(args["concurrency"]) as pool:
        statuses = list(pool.map(send, prepared, chunksize=4))
    end = time.time()
    adapter.close()
    return {"start": start, "end": end, "ok": sum(1 for s in statuses if s == 200), "rss_before_kb": before}


def plain_urllib3(args: dict) -> dict:
    """The client's limit at latency: urllib3's pool (one pool per receiver, as many
    connections as threads), `concurrency` threads posting the same signed bodies to the
    given URLs in turn. No database, no engine."""
    import urllib3

    urls = args["urls"]
    requests_ = _signed_posts(args, urls)
    pool = urllib3.PoolManager(num_pools=len(urls), maxsize=args["concurrency"], retries=False)

    def send(request: tuple[str, bytes, dict]) -> int:
        url, data, headers = request
        return pool.request("POST", url, body=data, headers=headers, timeout=10).status

    before = _rss_kb()
    start = time.time()
    with ThreadPoolExecutor(args["concurrency"]) as threads:
        statuses = list(threads.map(send, requests_, chunksize=4))
    end = time.time()
    pool.clear()
    return {"start": start, "end": end, "ok": sum(1 for s in statuses if s == 200), "rss_before_kb": before}


def plain_curl_client(args: dict) -> dict:
    """The limit of the webhook channel's own client: its `CurlClient` (libcurl's multi
    interface, one thread for every send in flight), begun from one thread with
    `concurrency` sends in flight, the same signed bodies to the given URLs in turn. No
    database, no engine; the address guard as the channel has it (loopback allowed)."""
    import ipaddress
    import threading

    from notifications.channels.http.curl import CurlClient

    urls = args["urls"]
    posts = [(url, data, [f"{k}: {v}" for k, v in headers.items()]) for url, data, headers in _signed_posts(args, urls)]
    client = CurlClient(
        allowed=(ipaddress.ip_network("127.0.0.0/8"),), body_limit=65536, connections=2 * args["concurrency"]
    )
    slots = threading.Semaphore(args["concurrency"])
    finished = threading.Event()
    lock = threading.Lock()
    counts = {"ok": 0, "ended": 0}

    def done(answer: object) -> None:
        with lock:
            counts["ended"] += 1
            counts["ok"] += getattr(answer, "status", None) == 200
            if counts["ended"] == len(posts):
                finished.set()
        slots.release()

    before = _rss_kb()
    start = time.time()
    for url, data, headers in posts:
        slots.acquire()
        client.begin(url, data, headers, 10, done)
    finished.wait(600)
    end = time.time()
    client.close()
    return {"start": start, "end": end, "ok": counts["ok"], "rss_before_kb": before}


def plain_libcurl(args: dict) -> dict:
    """libcurl in threads (as the webhook channel sent until its client drove every send from
    one thread): handles (one per thread,
    sharing one connection cache), `concurrency` threads posting the same signed bodies to
    the given URLs in turn. No database, no engine, no address guard."""
    import threading

    import pycurl

    urls = args["urls"]
    posts = _signed_posts(args, urls)
    share = pycurl.CurlShare()
    share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_CONNECT)
    local = threading.local()
    handles = []

    def send(request: tuple[str, bytes, dict]) -> int:
        url, data, headers = request
        curl = getattr(local, "curl", None)
        if curl is None:
            curl = local.curl = pycurl.Curl()
            handles.append(curl)
            curl.setopt(pycurl.SHARE, share)
            curl.setopt(pycurl.NOSIGNAL, 1)
            curl.setopt(pycurl.MAXCONNECTS, 2 * args["concurrency"])
            curl.setopt(pycurl.WRITEFUNCTION, len)
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.POSTFIELDS, data)
        curl.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in headers.items() if k.lower() != "content-length"])
        curl.setopt(pycurl.TIMEOUT_MS, 10_000)
        curl.perform()
        return int(curl.getinfo(pycurl.RESPONSE_CODE))

    before = _rss_kb()
    start = time.time()
    with ThreadPoolExecutor(args["concurrency"]) as threads:
        statuses = list(threads.map(send, posts, chunksize=4))
    end = time.time()
    for curl in handles:
        curl.close()
    return {"start": start, "end": end, "ok": sum(1 for s in statuses if s == 200), "rss_before_kb": before}


# --- the host site's writes, and a tick that counts its own ------------------------------------


def _host_write() -> None:
    """What a site's request does: schedule one reminder for later (never due in the run)."""
    from datetime import timedelta

    from django.utils import timezone

    from notifications.api import schedule

    schedule(
        channels=["email"],
        email_to="ada@example.com",
        subject="Your invoice is due",
        body="Invoice 7 is due tomorrow.",
        fire_at=timezone.now() + timedelta(days=1),
    )


def prepare_host_writes(args: dict) -> None:
    for _ in range(args.get("warmup", 20)):  # connection, imports, statement cache: before the clock
        _host_write()


def host_writes(args: dict) -> dict:
    """A host site's closed loop of `schedule()` calls for `seconds`; each call's start and latency."""
    from django.db import OperationalError

    calls: list[tuple[float, float]] = []
    errors = 0
    start = time.time()
    deadline = time.monotonic() + args["seconds"]
    while time.monotonic() < deadline:
        at = time.time()
        began = time.perf_counter()
        try:
            _host_write()
        except OperationalError:  # "database is locked" after the busy timeout
            errors += 1
            continue
        calls.append((round(at, 6), round(time.perf_counter() - began, 7)))
    end = time.time()
    return {"start": start, "end": end, "calls": calls, "errors": errors}


WRITE = re.compile(r'^\s*(UPDATE|DELETE\s+FROM|INSERT\s+INTO|REPLACE\s+INTO)\s+"?(\w+)"?', re.IGNORECASE)


class WriteMeter:
    """The write transactions one connection makes, and how long each holds the write lock.

    A transaction is either a write statement in autocommit (its time includes any wait
    for the lock) or BEGIN ... COMMIT (held from BEGIN's return to COMMIT's: with
    IMMEDIATE transactions, as the demo and the bench ship, BEGIN takes the lock).
    Grouped by what they wrote, e.g. `UPDATE notification` or `BEGIN: DELETE
    notification, INSERT deliveryattempt`.
    """

    def __init__(self, alias: str = "default") -> None:
        from django.db import connections

        self.connection = connections[alias]
        self.open: dict | None = None
        self.kinds: dict[str, dict[str, float]] = {}

    def __enter__(self) -> WriteMeter:
        self.wrapper = self.connection.execute_wrapper(self.execute)
        self.wrapper.__enter__()
        commit, rollback = self.connection._commit, self.connection._rollback
        self.connection._commit = lambda: self.end(commit)
        self.connection._rollback = lambda: self.end(rollback)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wrapper.__exit__(*exc)
        del self.connection._commit, self.connection._rollback  # back to the class's methods

    def execute(self, execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            took = time.perf_counter() - began
            if sql.lstrip()[:5].upper() == "BEGIN":
                self.open = {"parts": [], "since": time.perf_counter(), "wait": took}
            elif match := WRITE.match(sql):
                part = f"{match.group(1).split()[0].upper()} {match.group(2).removeprefix('notifications_')}"
                if self.open is not None:
                    if part not in self.open["parts"]:
                        self.open["parts"].append(part)
                elif not self.connection.in_atomic_block:
                    self.record(part, took, 0.0)

    def end(self, finish):
        try:
            return finish()
        finally:
            if self.open is not None:
                held = time.perf_counter() - self.open["since"]
                self.record(f"BEGIN: {', '.join(self.open['parts']) or 'no writes'}", held, self.open["wait"])
                self.open = None

    def record(self, kind: str, held: float, wait: float) -> None:
        entry = self.kinds.setdefault(kind, {"count": 0, "held": 0.0, "max": 0.0, "wait": 0.0})
        entry["count"] += 1
        entry["held"] += held
        entry["max"] = max(entry["max"], held)
        entry["wait"] += wait


def prepare_tick_writes(args: dict) -> None:
    from bench.common import make_rows

    make_rows(args["rows"], webhook_url=args["url"])


def tick_writes(args: dict) -> dict:
    """One tick (`run_tick`, as `runtick` runs it) draining the backlog, stopped after `stop_after` s.

    The stop is runtick's SIGTERM path: no new claims, the rows in flight finish.
    Counts the tick's write transactions (WriteMeter).
    """
    from notifications.api import run_tick

    stop = threading.Event()
    timer = threading.Timer(args["stop_after"], stop.set)
    timer.daemon = True
    with WriteMeter() as meter:
        start = time.time()
        timer.start()
        report = run_tick(stop=stop)
        end = time.time()
    timer.cancel()
    counts = report.counts()
    return {
        "start": start,
        "end": end,
        "summary": report.summary(),
        "claimed": counts["claimed"],
        "succeeded": counts["succeeded"],
        "batches": getattr(report, "batches", 0),
        "writes": meter.kinds,
    }


JOBS = {
    "runtick": runtick,
    "post_office": post_office,
    "plain_requests": plain_requests,
    "plain_adapter": plain_adapter,
    "plain_urllib3": plain_urllib3,
    "plain_libcurl": plain_libcurl,
    "plain_curl_client": plain_curl_client,
    "host_writes": host_writes,
    "tick_writes": tick_writes,
}
# Run before the "ready" line, off the clock: the jobs started together begin at once.
PREPARE = {"host_writes": prepare_host_writes, "tick_writes": prepare_tick_writes}


def main() -> None:
    import django

    job, args = sys.argv[1], json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")
    barrier = args.pop("barrier", False)
    django.setup()
    if job in PREPARE:
        PREPARE[job](args)
    if barrier:  # several jobs start together: say ready, wait for the go line
        print("ready", flush=True)
        sys.stdin.readline()
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = JOBS[job](args)
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["seconds"] = result["end"] - result["start"]
    result["rss_peak_kb"] = _rss_kb("VmHWM")
    # CPU the job took (user + system, every thread): steadier than wall time on a busy machine.
    result["cpu_seconds"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
