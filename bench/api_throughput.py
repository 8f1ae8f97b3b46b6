"""Creates per second through the HTTP API against schedule()/schedule_many() in-process.

    .venv/bin/python -m bench.api_throughput [--singles 300] [--batches 5]

A throwaway SQLite site in a temporary directory; the API is served by Django's threaded
WSGI server on a loopback port in this process and called with `requests` over one
keep-alive session (one client, one request at a time, as a service's loop would). Each
figure is rows created per second, the same rows both ways: single creates (one webhook
row each) and batches of 1,000.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROW = {"channels": ["webhook"], "webhook_url": "https://example.com/hook", "payload": {"n": 1}}
BATCH = 1000


def configure(workdir: Path) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench-only",
        USE_TZ=True,
        ALLOWED_HOSTS=["127.0.0.1"],
        ROOT_URLCONF="bench.api_throughput",
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "notifications"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(workdir / "db.sqlite3")}},
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


def serve() -> str:
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet, allow_reuse_address=True)
    server.set_app(get_wsgi_application())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/notifications/api/v1"


def rate(rows: int, began: float) -> float:
    return rows / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=300)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        configure(Path(workdir))
        import requests
        from django.core.management import call_command

        from notifications.api import schedule, schedule_many
        from notifications.services import tokens

        call_command("migrate", verbosity=0)
        base = serve()
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {tokens.create('bench', ['schedule'])[1]}"

        began = time.perf_counter()
        for _ in range(args.singles):
            schedule(**ROW)
        print(f"schedule() in-process:      {rate(args.singles, began):8.0f} rows/s ({args.singles} single creates)")
        began = time.perf_counter()
        for _ in range(args.singles):
            session.post(f"{base}/notifications", json=ROW, timeout=60).raise_for_status()
        print(f"POST notifications:         {rate(args.singles, began):8.0f} rows/s ({args.singles} single creates)")
        began = time.perf_counter()
        for _ in range(args.batches):
            schedule_many([ROW] * BATCH)
        print(f"schedule_many() in-process: {rate(args.batches * BATCH, began):8.0f} rows/s ({args.batches} x {BATCH})")
        began = time.perf_counter()
        for _ in range(args.batches):
            session.post(f"{base}/notifications/batch", json={"rows": [ROW] * BATCH}, timeout=300).raise_for_status()
        print(f"POST notifications/batch:   {rate(args.batches * BATCH, began):8.0f} rows/s ({args.batches} x {BATCH})")


if __name__ == "__main__":
    main()
