"""One tick: claim due rows, deliver them in parallel, write the outcomes back.

`Tick` reads the settings once and runs the tick's `Pipeline` (claims, workers, write-back:
`notifications.tick.pipeline`), then its housekeeping (history past retention) and its
record (`TickRun`). `run_tick` is the entry point of `manage.py runtick` and of the API.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from django.utils import timezone

from notifications import otel, store
from notifications.conf import TickSettings
from notifications.flow.pruning import prune_idle
from notifications.health.clock import measure_offset
from notifications.outcomes import Outcome
from notifications.tick.pipeline import Pipeline
from notifications.tick.report import TickReport

__all__ = ["Tick", "TickReport", "run_tick"]

logger = logging.getLogger("notifications.tick")


class Tick:
    """One tick: the settings, read once, and the event that stops it early."""

    def __init__(
        self,
        *,
        limit: int | None = None,
        budget: float | None = None,
        stop: threading.Event | None = None,
        queues: tuple[str, ...] = (),
        fast_lane_off: str = "",
    ):
        settings = TickSettings.read()  # the one read of the settings for this tick
        if limit is not None:
            settings = replace(settings, limit=int(limit))
        if queues:
            settings = replace(settings, queues=tuple(queues))
        if budget is not None:
            settings = settings.with_budget(float(budget))  # ValueError: a lease set by hand too short for it
        self.settings = settings
        self.stop = stop or threading.Event()
        self.fast_lane_off = fast_lane_off  # why this process's `runtick --loop` polls, for the record

    def run(self, now: datetime | None = None, on_outcome: Callable[[Outcome], None] | None = None) -> TickReport:
        report = TickReport(started_at=timezone.now())
        clock_offset = measure_offset()  # kept on the tick record and reported; never refuses a tick
        pipeline = Pipeline(self.settings, self.stop, report, fixed_now=now, on_outcome=on_outcome)
        # Escalations cancelled by a mark go before the claim (which leaves them out anyway).
        store.retry(lambda: store.settle_cancelled(now or timezone.now()), "escalations")
        pipeline.run()
        report.finished_at = timezone.now()
        otel.tick_duration((report.finished_at - report.started_at).total_seconds(), report.claimed)
        # History past retention goes until none is left or the budget is spent; a stopping
        # tick prunes one batch.
        until = None if self.stop.is_set() else pipeline.started + self.settings.budget
        self.finish(report, clock_offset, until)
        logger.debug("tick %s", report.summary(), extra={"host": socket.gethostname(), "pid": os.getpid()})
        return report

    def finish(self, report: TickReport, clock_offset: float | None, until: float | None) -> None:
        """Housekeeping and the tick's record, retried like the write-back (a connection lost
        while the last rows were in flight would otherwise fail a tick that did its work)."""
        finished = report.finished_at
        assert finished is not None
        retention = self.settings.attempt_retention_days
        inbox_days = self.settings.inbox_retention_days
        store.retry(
            lambda: store.prune(finished, retention, also=prune_idle, until=until, inbox_retention_days=inbox_days),
            "housekeeping",
        )
        store.retry(
            lambda: store.record_tick(
                report.started_at,
                finished,
                report.batches,
                report.counts(),
                clock_offset=clock_offset,
                held=report.held(),
                fast_lane_off=self.fast_lane_off,
            ),
            "tick record",
        )


def run_tick(
    *,
    now: datetime | None = None,
    limit: int | None = None,
    budget: float | None = None,
    stop: threading.Event | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    queues: tuple[str, ...] = (),
    fast_lane_off: str = "",
) -> TickReport:
    """Run one tick. `now` fixes the clock (tests); `stop` ends it early, losing nothing;
    `queues` limits it to the rows of those queues (empty: all); `fast_lane_off` is kept on
    the tick's record (`runtick --loop`: why its fast lane is silent)."""
    tick = Tick(limit=limit, budget=budget, stop=stop, queues=queues, fast_lane_off=fast_lane_off)
    return tick.run(now=now, on_outcome=on_outcome)
