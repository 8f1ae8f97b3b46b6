"""`manage.py notifications_status`: the queue's health for monitoring; exit 1 when ticks stopped."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from notifications.health import STALE_AFTER, QueueHealth, humanize, queue_health
from notifications.management.arguments import age


class Command(BaseCommand):
    help = (
        "Print rows per state, the oldest due row and the last tick. Exits with status 1 "
        "when no tick has finished recently (the cron line is not running)."
    )
    # Monitoring reads this output: keep it to the facts (`manage.py check` reports settings).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--stale-after",
            type=age,
            default=STALE_AFTER,
            metavar="AGE",
            help="how long without a finished tick counts as stopped (default 3m)",
        )
        parser.add_argument("--json", action="store_true", help="print the facts as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        health = queue_health(stale_after=options["stale_after"])
        if options["json"]:
            self.stdout.write(json.dumps(health.as_dict(), sort_keys=True))
        else:
            for line in describe(health):
                self.stdout.write(line)
        if health.stale:
            # Non-zero exit status so cron wrappers and monitoring notice.
            raise CommandError(health.warning)


def describe(health: QueueHealth) -> list[str]:
    """The facts as short lines of text."""
    counts = " ".join(f"{state}={count}" for state, count in health.counts.items())
    lines = [f"rows: {counts} in_flight={health.in_flight}"]
    if health.oldest_due_at is None:
        lines.append("oldest due: none")
    else:
        lines.append(f"oldest due: {health.oldest_due_at:%Y-%m-%d %H:%M:%S%z} ({humanize(health.oldest_due_age)} ago)")
    tick = health.last_tick
    if tick is None:
        lines.append("last tick: never")
    else:
        tally = " ".join(f"{name}={value}" for name, value in health.last_tick_counts().items())
        lines.append(
            f"last tick: {tick.finished_at:%Y-%m-%d %H:%M:%S%z} ({humanize(health.last_tick_age)} ago) "
            f"on {tick.host} pid {tick.pid}: {tally}"
        )
    lines.append("status: STALE" if health.stale else "status: OK")
    return lines
