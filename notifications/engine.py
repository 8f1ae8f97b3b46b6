"""One tick: claim due rows, deliver them in parallel, write the outcomes back.

Database work happens only in the calling thread and never inside a transaction that
waits on the network: a claim is one short transaction, delivery runs in worker
threads that touch no database, and each batch is written back in one short
transaction fenced by the batch's claim token.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from . import services, validation
from .channels import Channel, ChannelResult, ErrorClass, Firing
from .channels.email import EmailChannel
from .channels.webhook import WebhookChannel
from .conf import app_settings
from .models import DeliveryAttempt, Notification
from .services import Kind, Outcome, Policy

logger = logging.getLogger("notifications.tick")

# Extra wait beyond CHANNEL_TIMEOUT before a channel that ignores its deadline (a
# backend with no timeout of its own) is reported as timed out and left behind.
DEADLINE_GRACE = 1.0


@dataclass
class TickReport:
    """What one tick did, for the summary line and for monitoring."""

    started_at: datetime
    finished_at: datetime | None = None
    batches: int = 0
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, kind: Kind) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    @property
    def claimed(self) -> int:
        return len(self.outcomes)

    def counts(self) -> dict[str, int]:
        tally = Counter(o.kind for o in self.outcomes)
        return {
            "claimed": self.claimed,
            "succeeded": tally[Kind.SUCCEEDED],
            "partial": tally[Kind.PARTIAL],
            "retried": tally[Kind.RETRIED],
            "dead_lettered": tally[Kind.DEAD_LETTERED],
            "released": tally[Kind.RELEASED],
        }

    def summary(self) -> str:
        counts = self.counts()
        if not counts["released"]:
            del counts["released"]
        line = " ".join(f"{name}={value}" for name, value in counts.items())
        if self.finished_at:
            line += f" seconds={(self.finished_at - self.started_at).total_seconds():.2f}"
        return line


def claim(now: datetime, limit: int, lease: float) -> tuple[uuid.UUID, list[Notification]]:
    """Claim up to `limit` due rows, oldest first, for `lease` seconds.

    One conditional UPDATE sets a fresh token on the rows; they are then read back by
    that token. PostgreSQL skips rows another tick is claiming (FOR UPDATE SKIP
    LOCKED); SQLite runs the single UPDATE under its database write lock.
    """
    token = uuid.uuid4()
    due = Notification.objects.due(now).order_by("next_fire_at", "id").values("pk")[:limit]
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
    with transaction.atomic():
        claimed = Notification.objects.filter(pk__in=due).update(
            claim_token=token, claimed_until=now + timedelta(seconds=lease)
        )
    if not claimed:
        return token, []
    return token, list(Notification.objects.filter(claim_token=token).order_by("next_fire_at", "id"))


class Tick:
    """The parts of one tick: settings read once, channels and worker pools."""

    def __init__(self, *, limit: int | None = None, budget: float | None = None, stop: threading.Event | None = None):
        self.limit = int(limit if limit is not None else app_settings.TICK_LIMIT)
        self.budget = float(budget if budget is not None else app_settings.TICK_BUDGET)
        self.lease = app_settings.lease
        self.timeout = float(app_settings.CHANNEL_TIMEOUT)
        self.concurrency = max(1, int(app_settings.CONCURRENCY))
        self.policy = Policy.from_settings()
        self.stop = stop or threading.Event()

    def run(self, now: datetime | None = None, on_outcome: Callable[[Outcome], None] | None = None) -> TickReport:
        started = time.monotonic()
        report = TickReport(started_at=timezone.now())
        channels: dict[str, Channel] = {"email": EmailChannel(), "webhook": WebhookChannel()}
        rows_pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="notifications-row")
        channel_pool = ThreadPoolExecutor(2 * self.concurrency, thread_name_prefix="notifications-send")
        try:
            while not self.stop.is_set():
                batch_now = now or timezone.now()
                token, rows = claim(batch_now, self.batch_size(time.monotonic() - started), self.lease)
                if not rows:
                    break
                report.batches += 1
                outcomes = self.process(token, rows, batch_now, channels, rows_pool, channel_pool)
                report.outcomes.extend(outcomes)
                services.announce(outcomes)
                for outcome in outcomes:
                    if on_outcome:
                        on_outcome(outcome)
                if len(rows) < self.limit or time.monotonic() - started >= self.budget:
                    break
        finally:
            rows_pool.shutdown(wait=False, cancel_futures=True)
            channel_pool.shutdown(wait=False, cancel_futures=True)
            for channel in channels.values():
                channel.close()
        report.finished_at = timezone.now()
        services.prune_history(report.finished_at, float(app_settings.ATTEMPT_RETENTION_DAYS))
        services.record_tick(report.started_at, report.finished_at, report.batches, report.counts())
        logger.debug("tick %s", report.summary(), extra={"host": socket.gethostname(), "pid": os.getpid()})
        return report

    def batch_size(self, elapsed: float) -> int:
        """Claim no more than the workers can finish before the budget runs out.

        With every endpoint stuck, a batch takes ceil(n / concurrency) timeouts; capping
        n keeps a tick close to its budget whatever the endpoints do.
        """
        waves = max(1, math.floor((self.budget - elapsed) / max(self.timeout, 0.001)))
        return max(1, min(self.limit, self.concurrency * waves))

    def process(
        self,
        token: uuid.UUID,
        rows: list[Notification],
        now: datetime,
        channels: dict[str, Channel],
        rows_pool: ThreadPoolExecutor,
        channel_pool: ThreadPoolExecutor,
    ) -> list[Outcome]:
        outcomes: list[Outcome] = []
        pending: dict[Future[list[ChannelResult]], Firing] = {}
        for row in rows:
            try:
                errors = validation.field_errors(row)
                if errors:
                    outcomes.append(services.record_invalid(row, errors, now, self.policy))
                    continue
                firing = Firing(row, str(row.firing_id), timezone.now(), row.owed_channels)
            except Exception as exc:
                logger.exception("notification %s: internal error", row.pk)
                outcomes.append(services.record_internal_error(row, exc, now, self.policy))
                continue
            pending[rows_pool.submit(self.deliver, firing, channels, channel_pool)] = firing
        attempts: list[DeliveryAttempt] = []
        not_done = set(pending)
        while not_done:
            done, not_done = wait(not_done, timeout=0.5)
            if self.stop.is_set():
                for future in not_done:
                    future.cancel()  # unstarted rows are released below
            for future in done:
                outcomes.append(self.outcome(future, pending[future], now, attempts))
        services.save_outcomes(token, outcomes, attempts)
        return outcomes

    def outcome(self, future: Future, firing: Firing, now: datetime, attempts: list[DeliveryAttempt]) -> Outcome:
        row = firing.notification
        if future.cancelled():
            return services.release(row, now)
        try:
            results = future.result()
            attempts.extend(attempt_records(firing, results))
            return services.record_firing(row, results, now, self.policy)
        except Exception as exc:
            logger.exception("notification %s: internal error", row.pk)
            return services.record_internal_error(row, exc, now, self.policy)

    def deliver(self, firing: Firing, channels: dict[str, Channel], pool: ThreadPoolExecutor) -> list[ChannelResult]:
        """Runs in a row worker: the row's channels in parallel, each under its deadline."""
        futures = {pool.submit(channels[name].send, firing): name for name in firing.channels}
        done, _ = wait(futures, timeout=self.timeout + DEADLINE_GRACE)
        results = []
        for future, name in futures.items():
            if future in done:
                results.append(future.result())
            else:
                future.cancel()
                results.append(
                    ChannelResult(
                        name, f"{name}: timed out after {self.timeout:g}s", ErrorClass.TRANSIENT, duration=self.timeout
                    )
                )
        return results


def attempt_records(firing: Firing, results: list[ChannelResult]) -> list[DeliveryAttempt]:
    return [
        DeliveryAttempt(
            notification_id=firing.notification.pk,
            firing_id=firing.firing_id,
            channel=r.channel,
            outcome=DeliveryAttempt.Outcome.OK if r.ok else DeliveryAttempt.Outcome.FAILED,
            error=r.error or "",
            error_class=r.error_class.value if r.error_class and not r.ok else "",
            http_status=r.http_status,
            duration_ms=round(r.duration * 1000),
            attempted_at=firing.fired_at,
        )
        for r in results
    ]


def run_tick(
    *,
    now: datetime | None = None,
    limit: int | None = None,
    budget: float | None = None,
    stop: threading.Event | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> TickReport:
    """Run one tick. `now` fixes the clock (tests); `stop` ends it early, losing nothing."""
    return Tick(limit=limit, budget=budget, stop=stop).run(now=now, on_outcome=on_outcome)
