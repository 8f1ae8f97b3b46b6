"""`manage.py runtick`: one tick (or a loop of them), one timestamped summary line each.

System checks: an error stops it with one line per error; warnings are shown once when
`--loop` starts, never by a one-shot tick (cron would log them every minute; `manage.py
check` shows them all).
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import signal
import threading
import time
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from django.utils import timezone

from notifications.conf import TickSettings
from notifications.management.output import run_command_checks, settle_output, stamp, with_log_output
from notifications.models import Notification
from notifications.outcomes import TICK_COUNTS, Outcome
from notifications.services import wake
from notifications.store import reconnecting
from notifications.store.claims import claim_order, load_defensively
from notifications.tick import overruns
from notifications.tick.engine import TickReport, run_tick

logger = logging.getLogger("notifications.tick")


# Bounds of the options: a batch no database's LIMIT overflows, a budget no lease overflows.
MAX_LIMIT = 1_000_000
MAX_BUDGET = 86_400.0  # seconds: a day
QUEUE_NAME_CHARS = 100  # Notification.queue_name's column


def positive_int(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_LIMIT:,}")
    return number


def seconds(value: str) -> float:
    number = float(value)
    if not (0 <= number <= MAX_BUDGET):  # also refuses nan and infinity
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds from 0 to {MAX_BUDGET:g}")
    return number


def queue_name(value: str) -> str:
    if not value or len(value) > QUEUE_NAME_CHARS:
        raise argparse.ArgumentTypeError(f"must be a queue name of 1 to {QUEUE_NAME_CHARS} characters")
    return value


def interval(value: str) -> float:
    number = float(value)
    if not (number > 0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return number


def database_trouble(exc: BaseException) -> str:
    """One line for a tick the database failed (`--traceback` shows the rest)."""
    if reconnecting.is_read_only(exc):
        return (
            "the database is read-only (a replica, or read-only by default): a tick writes its claims "
            "and outcomes, so point DATABASES at a writable primary"
        )
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"the tick failed on the database: {type(exc).__name__}: {first}"


# Seconds a woken `--loop` lets pass after a tick before the next: a flood of
# announcements cannot make it spin.
MIN_TICK_GAP = 0.1


class Command(BaseCommand):
    help = "Deliver due notifications: claim, send, write back. Cron runs it every minute."
    show_check_warnings = False  # set per run: only `--loop` shows them, once

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.show_check_warnings = options.get("loop") is not None
        return super().execute(*args, **options)

    def check(
        self,
        app_configs: Any = None,
        tags: Any = None,
        display_num_errors: bool = False,
        include_deployment_checks: bool = False,
        fail_level: int = checks.ERROR,
        databases: Any = None,
    ) -> None:
        """Errors stop the tick, each on one line; warnings only when a `--loop` starts."""
        with_log_output(self)
        run_command_checks(
            "runtick --loop" if self.show_check_warnings else "runtick",
            warn=self.stderr.write if self.show_check_warnings else None,
            fail_level=fail_level,
            app_configs=app_configs,
            tags=tags,
            include_deployment_checks=include_deployment_checks,
            databases=databases,
        )

    def get_check_kwargs(self, options: dict[str, Any]) -> dict[Any, Any]:
        # Static checks only. Django 6 otherwise queries every database while checking
        # models, so a locked or restarting database failed the start with a misleading
        # "SQLite does not support JSONFields"; a tick reports database trouble itself.
        check_kwargs = super().get_check_kwargs(options)
        check_kwargs["databases"] = []
        return check_kwargs

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--limit", type=positive_int, help="rows claimed per batch (NOTIFICATIONS_TICK_LIMIT)")
        parser.add_argument("--budget", type=seconds, help="seconds after which no new batch is claimed")
        parser.add_argument(
            "--queue",
            action="append",
            type=queue_name,
            dest="queues",
            metavar="NAME",
            help="claim only the rows of this queue (repeat for several; default: every queue). "
            "Notifications are in 'default', tasks in their queue_name",
        )
        parser.add_argument("--dry-run", action="store_true", help="list what is due and change nothing")
        parser.add_argument(
            "--loop", type=interval, metavar="SECONDS", help="tick forever, one tick every SECONDS (no cron)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # A full disk under the log (or a closed pipe) must not end a tick or the loop.
        with_log_output(self)
        try:
            self.run(options)
        finally:
            settle_output(self)

    def run(self, options: dict[str, Any]) -> None:
        if options["budget"] is not None:
            try:
                TickSettings.read().with_budget(options["budget"])
            except ValueError as exc:
                raise CommandError(f"--budget {options['budget']:g}: {exc}") from None
        if options["dry_run"]:
            self.dry_run(options["limit"])
            return
        # What Django and the site built at start-up lives as long as the process: moved out
        # of the collector's way, so a tick's many short-lived objects do not make each full
        # collection walk all of it again (a few percent of a burst's CPU).
        gc.freeze()
        collect_less_often()
        stop = threading.Event()
        received = self.install_signal_handlers(stop)
        if options["loop"] is None:
            try:
                self.tick(options, stop)
            except reconnecting.DATABASE_ERRORS as exc:  # cron's to report: one line, non-zero exit
                raise CommandError(database_trouble(exc)) from exc
        else:
            self.loop(options, stop, options["loop"])
        if received:
            self.stderr.write(stamp(f"received signal {received[0]}: finished the rows in flight, released the rest"))

    def loop(self, options: dict[str, Any], stop: threading.Event, every: float) -> None:
        """Tick every `every` seconds until stopped.

        On PostgreSQL the wait between ticks also ends when a row is announced due
        (`notifications.services.wake`), at most one tick per `MIN_TICK_GAP`; elsewhere, or while
        the listening connection is down, the loop ticks at its interval.
        """
        waiter = wake.open_waiter()  # before the first tick: a row announced during it wakes the next
        woken = ", sooner when a row is announced due"
        if isinstance(waiter, wake.Poller):  # said once, here: why it polls (MariaDB/MySQL, SQLite, a silent fast lane)
            woken = f" ({waiter.reason})" if waiter.reason else ""
            if waiter.every is not None:
                every = min(every, waiter.every)
            # Each tick's record says it again, for notifications_status and the admin.
            options = {**options, "fast_lane_off": waiter.fast_lane_off}
        self.stdout.write(stamp(f"runtick --loop: one tick every {every:g}s{woken}; SIGTERM or SIGINT stops it"))
        ticks = 0
        totals: dict[str, int] = {}
        try:
            while not stop.is_set():
                started = time.monotonic()
                report = self.tick_in_loop(options, stop)
                ticks += 1
                for name, value in (report.counts() if report else {}).items():
                    totals[name] = totals.get(name, 0) + value
                if stop.is_set():
                    break
                connections.close_all()  # nothing is held across ticks (the waiter's own connection aside)
                # A send left running past its deadline keeps its row claimed: tick again
                # before that claim needs renewing (a tick renews it).
                renew_by = overruns.renewal_due(TickSettings.read().lease)
                next_tick = started + every if renew_by is None else min(started + every, renew_by)
                waiter.wait(next_tick, stop, not_before=time.monotonic() + MIN_TICK_GAP)
        finally:
            waiter.close()
            # Not `name=N`: log readers take those lines for a tick's summary.
            tally = ", ".join(f"{name} {value}" for name, value in totals.items() if name != "released")
            self.stdout.write(
                stamp(f"runtick --loop: stopped after {ticks} ticks" + (f"; in all {tally}" if tally else ""))
            )

    def tick(self, options: dict[str, Any], stop: threading.Event) -> TickReport:
        verbose = options["verbosity"] >= 2
        report = run_tick(
            limit=options["limit"],
            budget=options["budget"],
            stop=stop,
            on_outcome=self.print_outcome if verbose else None,
            queues=tuple(options.get("queues") or ()),
            fast_lane_off=options.get("fast_lane_off", ""),
        )
        self.stdout.write(stamp(report.summary(), report.finished_at))
        held = report.held()
        if held:  # what `deferred=N` does not say: a setting of this process holds rows
            self.stdout.write(stamp(f"{held} (this process's settings; manage.py check says how to fix it)"))
        return report

    def tick_in_loop(self, options: dict[str, Any], stop: threading.Event) -> TickReport | None:
        """One tick of `--loop`: a failing tick (database restarting, locked) does not end the loop.

        Cron would simply run the next tick; the loop does the same. Rows the failed
        tick had claimed come back when their lease expires.
        """
        try:
            return self.tick(options, stop)
        except Exception as exc:
            logger.exception("tick failed; the loop goes on")
            self.stderr.write(stamp(f"tick failed: {type(exc).__name__}: {str(exc)[:200]}"))
            return None

    def print_outcome(self, outcome: Outcome) -> None:
        line = f"#{outcome.row.pk} {outcome.kind.value}"
        if outcome.detail:
            line += f": {outcome.detail}"
        self.stdout.write(line)

    def dry_run(self, limit: int | None) -> None:
        now = timezone.now()
        due = Notification.objects.due(now).order_by(*claim_order(now))  # as a tick would claim them
        total = due.count()
        ids = list(due.values_list("pk", flat=True)[: limit or 1000])
        rows, unloadable = load_defensively(Notification.objects.filter(pk__in=ids).order_by(*claim_order(now)))
        for row in rows:
            self.stdout.write(
                f"#{row.pk} due since {row.next_fire_at:%Y-%m-%d %H:%M:%S%z} "
                f"channels={','.join(row.owed_channels)} attempts={row.error_count}"
            )
        for pk, error in unloadable.items():
            self.stdout.write(f"#{pk} cannot be loaded ({error}): the tick will dead-letter it")
        zeros = " ".join(f"{name}=0" for name in TICK_COUNTS if name != "released")
        self.stdout.write(stamp(f"dry run: due={total} {zeros}"))

    def install_signal_handlers(self, stop: threading.Event) -> list[int]:
        """SIGTERM/SIGINT: stop claiming, finish or release what is held, then exit.

        Returns the list the handler appends received signals to. The handler only sets
        `stop` (whose lock nothing else takes) and writes nothing: a handler that writes
        while the main thread is mid-write to the same stream would fail.
        """
        received: list[int] = []
        if threading.current_thread() is not threading.main_thread():
            return received  # signals can only be handled on the main thread (call_command in tests)

        def request_stop(signum: int, frame: Any) -> None:
            if stop.is_set():
                raise KeyboardInterrupt  # a second signal: give up at once
            received.append(signum)
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        return received


# Allocations (net) between the collector's young collections in a runtick process.
YOUNG_COLLECTION_EVERY = 50_000


def collect_less_often() -> None:
    """Collect the young generation every YOUNG_COLLECTION_EVERY allocations, not Python's 700.

    A tick holds its rows in hand for the length of a send: at the default, the collector ran
    every few rows, found them all alive and promoted them, then walked them again in the
    older generations (250 young, 22 middle and 2 full collections over 6,000 webhooks: ~20 us
    of the tick thread's CPU per delivery). What a tick allocates is freed by reference
    counting when its batch is written back, so the threshold is rarely reached; cyclic
    garbage waits a little longer. The command owns its process: `run_tick` called from host
    code leaves the host's collector alone.
    """
    young, *older = gc.get_threshold()
    if young and young < YOUNG_COLLECTION_EVERY:  # 0: the site turned the collector off
        gc.set_threshold(YOUNG_COLLECTION_EVERY, *older)
