"""`manage.py notifications_status`: the queue's health for monitoring.

`--prometheus` prints the metrics of `notifications.metrics` instead (always exit 0).

Exits 1 when ticks stopped, when `runtick` would refuse to start with this process's
settings (a system check error), when a ticking host's clock is further from the
database's than the threshold, or while a setting holds rows back (webhooks the site
cannot sign, email with attachments in a relative storage, ...).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from notifications.health.queue import STALE_AFTER, QueueHealth, describe_offset, humanize, queue_health
from notifications.management.arguments import age
from notifications.management.output import tick_refusals


class Command(BaseCommand):
    help = (
        "Print rows per state, the oldest due row and the last tick. Exits with status 1 "
        "when no tick has finished recently (the cron line is not running), when runtick would refuse to start "
        "(a system check error), when a ticking host's "
        "clock is too far from the database's, or while rows are held for a setting (no webhook signing key)."
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
        parser.add_argument(
            "--max-clock-offset",
            type=seconds,
            default=None,
            metavar="SECONDS",
            help="how far a host's clock may be from the database's (default NOTIFICATIONS_MAX_CLOCK_OFFSET, 5)",
        )
        output = parser.add_mutually_exclusive_group()
        output.add_argument("--json", action="store_true", help="print the facts as one JSON object")
        output.add_argument(
            "--prometheus",
            action="store_true",
            help="print the metrics in Prometheus' text format (for node_exporter's textfile collector); "
            "exits 0 whatever they say",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["prometheus"]:
            # A textfile collector's wrapper moves the output into place only on success: a
            # stopped cron line shows in notifications_last_tick_timestamp_seconds instead.
            self.stdout.write(prometheus_text(), ending="")
            return
        health = queue_health(stale_after=options["stale_after"], max_clock_offset=options["max_clock_offset"])
        refusals = tick_refusals()  # what would stop `runtick` here: cron's log may be read by nobody
        if options["json"]:
            self.stdout.write(json.dumps({**health.as_dict(), "tick_refused": refusals}, sort_keys=True))
        else:
            for line in describe(health, refusals):
                self.stdout.write(line)
        refused = f"runtick refuses to run with this process's settings: {'; '.join(refusals)}." if refusals else ""
        warnings = (health.warning, refused, health.clock_warning, health.configuration_warning, health.last_tick_held)
        problems = [warning for warning in warnings if warning]
        if problems:
            # Non-zero exit status so cron wrappers and monitoring notice.
            raise CommandError(" ".join(problems))


def prometheus_text() -> str:
    """The metrics as text; CommandError when prometheus_client is not installed."""
    try:
        from notifications.health import prometheus
    except ImportError:
        raise CommandError(
            '--prometheus needs prometheus_client: pip install "django-notification-queue[prometheus]"'
        ) from None
    return prometheus.exposition().decode()


def seconds(value: str) -> float:
    """A positive number of seconds (argparse `type=`)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError("the offset must be a positive number of seconds")
    return number


def describe(health: QueueHealth, refusals: list[str] | None = None) -> list[str]:
    """The facts as short lines of text; `refusals`: the errors that stop `runtick` here."""
    counts = " ".join(f"{state}={count}" for state, count in health.counts.items())
    lines = [f"rows: {counts} in_flight={health.in_flight}"]
    if health.open_digests:
        lines.append(f"open digests: {health.open_digests}")
    if health.oldest_due_at is None:
        lines.append("oldest due: none")
    else:
        lines.append(f"oldest due: {health.oldest_due_at:%Y-%m-%d %H:%M:%S%z} ({humanize(health.oldest_due_age)} ago)")
    tick = health.last_tick
    if tick is None:
        lines.append("last tick: never")
    else:
        tally = " ".join(f"{name}={value}" for name, value in health.last_tick_counts().items())
        clock = "" if tick.clock_offset is None else f" (clock {tick.clock_offset:+.1f}s)"
        lines.append(
            f"last tick: {tick.finished_at:%Y-%m-%d %H:%M:%S%z} ({humanize(health.last_tick_age)} ago) "
            f"on {tick.host} pid {tick.pid}{clock}: {tally}"
        )
    for host, offset in health.skewed_hosts.items():
        lines.append(
            f"clock skew: {host} is {describe_offset(offset)} the database's clock "
            f"(limit {health.max_clock_offset:g}s): synchronise it with NTP"
        )
    # Two views of a hold: this command's own settings (its environment may lack what
    # cron's has, or the reverse) and what the last tick, in cron's process, reported.
    if health.configuration_warning:
        lines.append(f"held by this process's settings: {health.configuration_warning}")
    if tick is not None and (tick.held or health.configuration_warning):
        lines.append(f"held by the last tick (pid {tick.pid} on {tick.host}): {tick.held or 'nothing'}")
    lines.extend(health.flow.lines())  # open circuits, targets at their limit
    # Rows still go out (at the loop's poll interval): said, not a failing status.
    lines.extend(f"fast lane off: runtick --loop pid {loop}: {why}" for loop, why in health.fast_lanes_off.items())
    lines.extend(f"runtick refuses to run: {refusal} (manage.py check gives the hint)" for refusal in refusals or [])
    flags = (
        ("STALE", health.stale),
        ("TICK REFUSED (this process's settings)", bool(refusals)),
        ("CLOCK SKEW", bool(health.skewed_hosts)),
        ("HELD (this process's settings)", bool(health.configuration_warning)),
        ("HELD (the last tick)", bool(tick and tick.held)),
    )
    status = [word for word, bad in flags if bad]
    lines.append(f"status: {', '.join(status)}" if status else "status: OK")
    return lines
