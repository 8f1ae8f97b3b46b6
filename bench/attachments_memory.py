"""Peak memory of one tick sending rows with large attachments (issue 34 finding 7).

    python bench/attachments_memory.py                     # 40 rows x 10 MiB, concurrency 40
    python bench/attachments_memory.py --rows 100 --concurrency 8

A throwaway SQLite database and media folder; one process queues the rows with
`schedule(attachments=...)`, then a fresh process runs one tick and reports its peak RSS
(`ru_maxrss`), once per NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT value: "unbounded" (a
budget larger than every row together: what the tick did before the budget) and the default
(32 MiB). Mail goes to a backend that writes each message out as Django's SMTP backend does
(`message().as_bytes(linesep="\\r\\n")`) and drops it: no server's memory is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.core.mail.backends.base import BaseEmailBackend

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIB = 1024 * 1024


class SerializingBackend(BaseEmailBackend):
    """An email backend that builds each message's bytes, as SMTP sends them, and drops them."""

    def send_messages(self, messages: Any) -> int:
        for message in messages:
            message.message().as_bytes(linesep="\r\n")
        return len(messages)


def configure(workdir: Path, concurrency: int, in_flight: int) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench-only",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "notifications"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(workdir / "db.sqlite3")}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        MEDIA_ROOT=str(workdir / "media"),
        DEFAULT_FROM_EMAIL="bench@example.com",
        NOTIFICATIONS_EMAIL_BACKEND="bench.attachments_memory.SerializingBackend",
        NOTIFICATIONS_CONCURRENCY=concurrency,
        NOTIFICATIONS_CHANNEL_TIMEOUT=60,
        NOTIFICATIONS_TICK_BUDGET=120,
        NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT=in_flight,
        NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 0},
        NOTIFICATIONS_WEBHOOK_SECRET="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )
    django.setup()


def prepare(workdir: Path, rows: int, mib: int) -> None:
    configure(workdir, 1, 32 * MIB)
    from django.core.management import call_command

    from notifications.api import schedule
    from notifications.models.attachments import Attachment

    call_command("migrate", verbosity=0)
    with override_max(rows * mib * MIB):
        for i in range(rows):
            schedule(
                channels=["email"],
                email_to="ada@example.com",
                subject=f"Report {i}",
                body="Attached.",
                attachments=[Attachment(f"report-{i}.bin", os.urandom(mib * MIB), "application/octet-stream")],
            )


def override_max(limit: int) -> Any:
    from django.test.utils import override_settings

    return override_settings(NOTIFICATIONS_MAX_ATTACHMENT_BYTES=limit)


def tick(workdir: Path, concurrency: int, in_flight: int) -> dict[str, Any]:
    configure(workdir, concurrency, in_flight)
    from notifications.api import run_tick

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    report = run_tick()
    return {
        "sent": report.counts()["succeeded"],
        "seconds": round(time.monotonic() - started, 2),
        "rss_before_mib": round(before / 1024, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def child(*args: str) -> str:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--mib", type=int, default=10, help="MiB of attachment per row")
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--in-flight", type=int, nargs="*", default=None, help="budgets to measure, in MiB")
    parser.add_argument("--step", choices=["prepare", "tick"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.step == "prepare":
        prepare(Path(options.workdir), options.rows, options.mib)
        return
    if options.step == "tick":
        print(json.dumps(tick(Path(options.workdir), options.concurrency, options.bytes)))
        return
    unbounded = options.rows * options.mib * MIB * 4  # more than every row together
    budgets = [(f"{b} MiB", b * MIB) for b in options.in_flight] if options.in_flight else []
    budgets = budgets or [("unbounded (before)", unbounded), ("32 MiB (default)", 32 * MIB)]
    print(f"{options.rows} rows x {options.mib} MiB attachment, concurrency {options.concurrency}\n")
    print("| NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT | sent | seconds | RSS before the tick | peak RSS |")
    print("|---|---|---|---|---|")
    for label, limit in budgets:
        with tempfile.TemporaryDirectory(prefix="bench-attachments-") as tmp:
            common = ["--workdir", tmp, "--rows", str(options.rows), "--mib", str(options.mib)]
            child("--step", "prepare", *common)
            result = json.loads(
                child("--step", "tick", *common, "--concurrency", str(options.concurrency), "--bytes", str(limit))
            )
        print(
            f"| {label} | {result['sent']} | {result['seconds']} | {result['rss_before_mib']} MiB "
            f"| {result['peak_rss_mib']} MiB |"
        )


if __name__ == "__main__":
    main()
