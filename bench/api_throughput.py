"""Creates per second through the HTTP API against schedule()/schedule_many() in-process.

    .venv/bin/python -m bench.api_throughput [--singles 300] [--batches 5]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.api_throughput
    ... --conn-max-age 60   # the server keeps its database connections (Django's CONN_MAX_AGE)

A throwaway database (SQLite, or the server DATABASE_URL names); the API is served by
Django's threaded WSGI server on a loopback port in a child process (a server of its
own, as a site's would be) and called with `requests` over one keep-alive session (one
client, one request at a time, as a service's loop would). Each figure is rows created
per second, the same rows each way: single creates (one webhook row each, also with an
`Idempotency-Key` apiece) and batches of 1,000.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from bench.common import ROOT, throwaway_database

ROW = {"channels": ["webhook"], "webhook_url": "https://example.com/hook", "payload": {"n": 1}}
BATCH = 1000
DATABASE = "BENCH_API_DATABASE"  # the child server's DATABASES entry, as JSON


def configure(database: dict[str, Any]) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench-only",
        USE_TZ=True,
        ALLOWED_HOSTS=["127.0.0.1"],
        ROOT_URLCONF="bench.api_throughput",
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "notifications"],
        DATABASES={"default": database},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        NOTIFICATIONS_WEBHOOK_SECRET="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )
    django.setup()


def urls() -> list[Any]:
    from django.urls import include, path

    return [path("notifications/", include("notifications.urls"))]


def __getattr__(name: str) -> Any:  # this module is the URLconf too: built once Django is set up
    if name == "urlpatterns":
        return urls()
    raise AttributeError(name)


def serve() -> None:
    """The child: serve the API on a free loopback port, print the port, run until killed."""
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    configure(json.loads(os.environ[DATABASE]))

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet, allow_reuse_address=True)
    server.set_app(get_wsgi_application())
    print(server.server_port, flush=True)
    server.serve_forever()


def start_server(database: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.api_throughput", "--serve"],
        cwd=ROOT,
        env={**os.environ, DATABASE: json.dumps(database)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    port = child.stdout.readline().strip()
    if not port.isdigit():
        child.kill()
        raise SystemExit("the API server did not start")
    threading.Thread(target=child.stdout.read, daemon=True).start()  # drain whatever else it prints
    return child, f"http://127.0.0.1:{port}/notifications/api/v1"


def rate(rows: int, began: float) -> float:
    return rows / (time.perf_counter() - began)


def measure(args: argparse.Namespace, database: dict[str, Any]) -> None:
    configure(database)
    import requests
    from django.core.management import call_command
    from django.db import connection

    from notifications.api import schedule, schedule_many
    from notifications.services import tokens

    call_command("migrate", verbosity=0)
    token = tokens.create("bench", ["schedule"])[1]
    child, base = start_server(database)
    try:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        print(f"{connection.vendor}, the server's CONN_MAX_AGE={database['CONN_MAX_AGE']}:")

        began = time.perf_counter()
        for _ in range(args.singles):
            schedule(**ROW)
        print(f"schedule() in-process:      {rate(args.singles, began):8.0f} rows/s ({args.singles} single creates)")
        began = time.perf_counter()
        for _ in range(args.singles):
            session.post(f"{base}/notifications", json=ROW, timeout=60).raise_for_status()
        print(f"POST notifications:         {rate(args.singles, began):8.0f} rows/s ({args.singles} single creates)")
        began = time.perf_counter()
        for n in range(args.singles):
            headers = {"Idempotency-Key": f"bench-{n}"}
            session.post(f"{base}/notifications", json=ROW, headers=headers, timeout=60).raise_for_status()
        print(f"  with an Idempotency-Key:  {rate(args.singles, began):8.0f} rows/s ({args.singles} single creates)")
        began = time.perf_counter()
        for _ in range(args.batches):
            schedule_many([ROW] * BATCH)
        print(f"schedule_many() in-process: {rate(args.batches * BATCH, began):8.0f} rows/s ({args.batches} x {BATCH})")
        began = time.perf_counter()
        for _ in range(args.batches):
            session.post(f"{base}/notifications/batch", json={"rows": [ROW] * BATCH}, timeout=300).raise_for_status()
        print(f"POST notifications/batch:   {rate(args.batches * BATCH, began):8.0f} rows/s ({args.batches} x {BATCH})")
    finally:
        child.kill()
        child.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=300)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--conn-max-age", type=int, default=0, help="the server's CONN_MAX_AGE (Django's default: 0)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child server
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    with throwaway_database(os.environ.get("DATABASE_URL")) as database:
        measure(args, {**database, "CONN_MAX_AGE": args.conn_max_age})


if __name__ == "__main__":
    main()
