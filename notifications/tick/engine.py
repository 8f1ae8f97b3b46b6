"""One tick: claim due rows, deliver them in parallel, write the outcomes back.

Database work happens only in the calling thread and never inside a transaction that
waits on the network: a claim is one short transaction, delivery runs in worker
threads that touch no database, and each batch is written back in one short
transaction fenced by the batch's claim token.

The tick is a pipeline. Workers take claimed rows from a `Dispatcher` and hand back
outcomes; meanwhile the calling thread claims the next batch before the workers run
dry and writes back each batch as soon as its last row is done. The dispatcher keeps
one queue per target (webhook host, or email) and gives a free worker to the target
with the fewest rows in flight, so a stuck endpoint cannot hold every worker while
rows to healthy ones wait.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.utils import timezone

from notifications import registry, services, telemetry
from notifications.channels import Channel, ChannelResult, Firing
from notifications.conf import TickSettings
from notifications.flow.control import FlowControl
from notifications.flow.pruning import prune_idle
from notifications.flow.recipients import screen
from notifications.flow.targets import channel_target, target_of
from notifications.health.clock import measure_offset
from notifications.models import DeliveryAttempt, Notification, validation
from notifications.models.log import SENT_TO_CHARS, SUMMARY_CHARS
from notifications.services import TICK_COUNTS, Kind, Outcome, digests, reconnecting
from notifications.services.claims import Claim, claim, release_tokens
from notifications.tick import tallies
from notifications.tick.dispatch import Batch, Dispatcher, Job
from notifications.tick.workers import Reported, Workers

logger = logging.getLogger("notifications.tick")

# How often the tick looks for sends that overran CHANNEL_TIMEOUT + DEADLINE_GRACE.
MONITOR_INTERVAL = 0.25
# How often the tick's own thread collects finished rows and tops up the queue.
POLL_INTERVAL = 0.005
# Claims and write-backs take the database's write lock, which on SQLite is the host
# site's too: a draining tick writes finished batches back at most this often (seconds),
# tops up its queue in chunks (see `claim_wanted`)...
WRITE_INTERVAL = 0.25
# ...and claims only because a capped target leaves workers idle at most this often.
STARVED_CLAIM_INTERVAL = 0.5
# Claim the next batch while fewer than this many rows per worker wait, so the workers
# never run dry while a claim takes its turn at the database.
LOW_WATER_ROWS_PER_WORKER = 2
# Rows waiting in the dispatcher at most when a capped target leaves workers idle: this
# many batches, or this many rows per worker if that is more. Each waiting row holds a
# claim no other tick can take, so the tick looks past a stuck target only this far.
HIGH_WATER_BATCHES = 3
HIGH_WATER_ROWS_PER_WORKER = 4
# How an outcome's detail starts when a setting held the row (`services.held_back`).
HELD = "held: "


class Counts(dict[str, int]):
    """A tick's counts by name; a count left out of the listing (`skipped` at 0) reads 0."""

    def __missing__(self, name: str) -> int:
        if name in TICK_COUNTS:
            return 0
        raise KeyError(name)


@dataclass
class TickReport:
    """What one tick did, for the summary line and for monitoring.

    Only counts are kept, so a tick's memory does not grow with the rows it drains;
    `run_tick(on_outcome=...)` sees every row's outcome as its batch is written.
    """

    started_at: datetime
    finished_at: datetime | None = None
    batches: int = 0
    tally: Counter[Kind] = field(default_factory=Counter)
    # Rows held for a setting, by reason (`held: webhook: no signing secret ...`): what the
    # summary's `deferred` does not say, and what `notifications_status` reads back.
    holds: Counter[str] = field(default_factory=Counter)

    @property
    def claimed(self) -> int:
        return sum(self.tally.values())

    def counts(self) -> dict[str, int]:
        counts = Counts({name: self.claimed if name == "claimed" else self.tally[Kind(name)] for name in TICK_COUNTS})
        if not counts["skipped"]:  # recipients' choices: listed once something was skipped (still reads 0)
            del counts["skipped"]
        return counts

    def held(self) -> str:
        """The holds for a setting, one `N rows held: reason` each (blank: none)."""
        return "; ".join(f"{n} held: {reason.removeprefix(HELD)}" for reason, n in self.holds.most_common())

    def summary(self) -> str:
        counts = self.counts()
        if not counts["released"]:
            del counts["released"]
        line = " ".join(f"{name}={value}" for name, value in counts.items())
        if self.finished_at:
            line += f" seconds={(self.finished_at - self.started_at).total_seconds():.2f}"
        return line


class Tick:
    """The parts of one tick: settings read once, channels and worker threads."""

    def __init__(self, *, limit: int | None = None, budget: float | None = None, stop: threading.Event | None = None):
        settings = TickSettings.read()  # the one read of the settings for this tick
        if limit is not None:
            settings = replace(settings, limit=int(limit))
        if budget is not None:
            settings = settings.with_budget(float(budget))  # ValueError: a lease set by hand too short for it
        self.settings = settings
        self.limit = settings.limit
        self.budget = settings.budget
        self.lease = settings.lease
        self.timeout = settings.channel_timeout
        self.concurrency = settings.concurrency
        self.target_concurrency = settings.target_concurrency
        self.policy = settings.policy
        self.quiet_hours = settings.quiet_hours
        self.stop = stop or threading.Event()
        # Claim the next batch while this many rows still wait, so workers never run dry;
        # claim up to `high_water` waiting rows when a capped target leaves workers idle.
        self.low_water = LOW_WATER_ROWS_PER_WORKER * self.concurrency
        self.high_water = max(HIGH_WATER_BATCHES * self.limit, HIGH_WATER_ROWS_PER_WORKER * self.concurrency)

    def run(self, now: datetime | None = None, on_outcome: Callable[[Outcome], None] | None = None) -> TickReport:
        self.fixed_now = now
        self.on_outcome = on_outcome
        self.report = TickReport(started_at=timezone.now())
        clock_offset = measure_offset()  # kept on the tick record and reported; never refuses a tick
        self.started = time.monotonic()
        self.channels: dict[str, Channel] = registry.open_for_tick(self.settings)  # one instance per name
        self.flow = FlowControl(self.lease)  # circuit breakers and rate limits
        self.dispatcher = Dispatcher(self.concurrency, self.target_concurrency, paused=self.flow.tripped)
        self.results: queue.SimpleQueue[Reported] = queue.SimpleQueue()
        self.workers = Workers(
            self.dispatcher,
            self.results,
            self.channels,
            timeout=self.timeout,
            concurrency=self.concurrency,
            record=self.record,
            internal_error=self.internal_error,
            watch=self.watch,
        )
        self.held = 0  # rows claimed and not yet given an outcome
        self.exhausted = False  # a claim came back short: nothing more is due
        self.digests_wanted = True  # digests may be due: see claim_digests
        self.finished: list[Batch] = []  # batches with every outcome, not yet written back
        self.next_write = self.next_starved_claim = self.next_check = time.monotonic()
        self.live_workers = 0  # started as claimed rows need them (see claim_if_needed), never stopped
        # The database error that ended claiming (retries spent): what is held is still
        # finished and written back, then the tick fails with it.
        self.failure: Exception | None = None
        try:
            while True:
                self.reap_overdue()
                if self.stop.is_set():
                    self.release_waiting()
                if not self.claim_if_needed():
                    if self.held == 0 and self.done_claiming():
                        break
                    # Poll rather than block on the queue: one wake-up per interval collects
                    # every row finished meanwhile, instead of one wake-up per row.
                    time.sleep(POLL_INTERVAL)
                # After a claim too: workers that take rows as fast as they are claimed must
                # not keep the finished ones from being written back until claiming ends.
                self.collect_finished()
                self.write_back(force=self.held == 0)
            self.write_back(force=True, last=True)
            if self.failure is not None:
                raise self.failure
        finally:
            self.dispatcher.close()
            self.workers.close()
            for channel in self.channels.values():
                channel.close()
        report = self.report
        report.finished_at = timezone.now()
        telemetry.record_tick((report.finished_at - report.started_at).total_seconds(), report.claimed)
        # History past retention goes until none is left or the budget is spent; a stopping
        # tick prunes one batch.
        until = None if self.stop.is_set() else self.started + self.budget
        # Housekeeping and the tick's record, retried like the write-back (a connection lost
        # while the last rows were in flight would otherwise fail a tick that did its work).
        finished = report.finished_at
        retention = self.settings.attempt_retention_days
        reconnecting.retry(lambda: services.prune(finished, retention, also=prune_idle, until=until), "housekeeping")
        reconnecting.retry(
            lambda: services.record_tick(
                report.started_at,
                finished,
                report.batches,
                report.counts(),
                clock_offset=clock_offset,
                held=report.held(),
            ),
            "tick record",
        )
        logger.debug("tick %s", report.summary(), extra={"host": socket.gethostname(), "pid": os.getpid()})
        return report

    # --- the loop's steps, in the order it takes them ---------------------------------------

    def start_worker(self) -> None:
        self.live_workers += 1
        self.workers.start()

    def reap_overdue(self) -> None:
        """Every MONITOR_INTERVAL: report sends that overran every deadline, replace their workers."""
        if time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + MONITOR_INTERVAL
        for _ in self.workers.abandon_overdue():
            self.live_workers -= 1  # the stuck one is left behind and ends when its send returns...
            self.start_worker()  # ...so keep the concurrency

    def release_waiting(self) -> None:
        """Stopping: rows no worker has started are handed back, due again at once."""
        for job in self.dispatcher.drain():
            self.results.put((job, services.release(job.row, job.batch.now), []))

    def done_claiming(self) -> bool:
        """No more batches: stopping, nothing more due, or the budget is spent.

        The budget stops *new* batches: the first one is always claimed, so `--budget 0`
        means "one batch".
        """
        spent = time.monotonic() - self.started >= self.budget and self.report.batches > 0
        return self.stop.is_set() or self.exhausted or spent or self.failure is not None

    def claim_if_needed(self) -> bool:
        """Claim the next batch when the workers need it; True if a claim was made."""
        elapsed = time.monotonic() - self.started
        size = 0 if self.done_claiming() else self.claim_size(elapsed, self.held, self.dispatcher.busiest())
        more = size > 0 and self.dispatcher.waiting < self.high_water
        self.dispatcher.set_capped(more)
        if not more or self.flow.paused() or not self.claim_wanted(size):
            return False
        batch_now = self.fixed_now or timezone.now()
        try:
            claimed = claim(batch_now, size, self.lease)  # lost connections and deadlocks retried
        except reconnecting.DATABASE_ERRORS as exc:
            if not self.held and not self.finished:
                raise  # nothing to finish: the caller reports it
            self.give_up_claiming(exc)
            return False
        try:
            self.take(claimed, size, batch_now)
        except reconnecting.DATABASE_ERRORS as exc:
            # The batch never reached a worker: hand it back, due again at once.
            self.give_up_claiming(exc, release=claimed.token)
            return False
        return True

    def give_up_claiming(self, exc: Exception, release: uuid.UUID | None = None) -> None:
        """The database failed a claim beyond its retries: claim nothing more, but finish
        and write back the rows held (a tick that died here would leave them claimed
        until the lease ends and send them again). `release`: a batch claimed but never
        handed to a worker, released if the database lets us."""
        code = reconnecting.error_code(exc)
        logger.error("claim failed, no more claims this tick: %s (%s)", type(exc).__name__, code)
        self.failure = self.failure or exc
        if release is not None:
            try:
                reconnecting.retry(lambda: release_tokens([release]), "release")
            except reconnecting.DATABASE_ERRORS:
                logger.error("could not release a claimed batch: its rows wait for the lease to end")

    def take(self, claimed: Claim, size: int, batch_now: datetime) -> None:
        """Hand a claimed batch to the workers (rows held back, deferred and unloadable
        get their outcomes at once)."""
        self.exhausted = claimed.size < size
        self.claim_digests(claimed, batch_now, size)
        if claimed.size:
            self.report.batches += 1
        if claimed.unloadable:
            dead = services.dead_letter_unloadable(claimed.token, claimed.unloadable, batch_now, self.policy)
            self.report.tally[Kind.DEAD_LETTERED] += dead
        if claimed.rows:
            for channel in self.channels.values():
                channel.prepare(claimed.rows)  # e.g. the suppressed addresses: workers touch no database
            ready, held = self.hold_back(claimed.rows, batch_now)
            ready = self.file_for_digests(ready, claimed.token, batch_now)
            self.held += len(ready) + len(held)
            batch = Batch(claimed.token, batch_now, len(ready) + len(held))
            screened = screen(ready, self.channels, batch_now)  # recipients' choices, throttles
            batch.attempts += screened.attempts
            send, deferred = self.flow.admit(screened.send, batch_now)  # open circuits, rate limits
            for outcome in held + screened.settled + deferred:
                self.results.put((Job(batch, outcome.row, ""), outcome, []))
            self.dispatcher.put([Job(batch, row, target_of(row), targets=channel_targets(row)) for row in send])
            # Threads as the rows need them, up to CONCURRENCY: a tick of a few rows starts a few.
            for _ in range(self.dispatcher.useful_workers() - self.live_workers):
                self.start_worker()
        if self.exhausted and self.flow.pause_if_waiting(batch_now, self.budget - (time.monotonic() - self.started)):
            self.exhausted = False  # rows a rate limit deferred come due within the budget: wait for them

    def hold_back(self, rows: list[Notification], now: datetime) -> tuple[list[Notification], list[Outcome]]:
        """Rows that may go now, and outcomes for those that must not: invalid (dead-lettered,
        saying why), too late, inside quiet hours, held for a setting. Settled before flow
        control, so they take no rate-limit slot and are never a circuit's probe."""
        ready, held = [], []
        for row in rows:
            try:
                errors = validation.field_errors(row)
                if errors:
                    held.append(services.record_invalid(row, errors, now, self.policy))
                    continue
                hold = services.held_back(row, now, self.settings)
            except Exception as exc:  # a poison row costs only itself
                logger.exception("notification %s: internal error", row.pk)
                held.append(services.record_internal_error(row, exc, now, self.policy))
                continue
            if hold is None:
                ready.append(row)
            else:
                held.append(services.record_held(row, hold, now))
        return ready, held

    def claim_digests(self, claimed: Claim, now: datetime, size: int) -> None:
        """Add whole digests whose window has ended to `claimed` (same token): with the
        tick's first claim, and again while more are due (a full claim of them, or a digest
        that filing has just closed). One statement when none is due."""
        if not self.digests_wanted:
            return
        self.digests_wanted = digests.claim_into(claimed, now, size, self.lease)
        if self.digests_wanted:
            self.exhausted = False

    def file_for_digests(self, rows: list[Notification], token: uuid.UUID, now: datetime) -> list[Notification]:
        """Rows that wait for a digest join one (written at once, claim released, no outcome);
        the rest go on. A digest due now (its window over, or full) is claimed next."""
        filing = digests.file_due(rows, now, token)
        if filing.closed:
            self.digests_wanted = True
            self.exhausted = False
        return filing.rows

    def claim_wanted(self, size: int) -> bool:
        """Whether to claim now. Claims take the database's write lock (all of it, on
        SQLite), so they come in chunks rather than a few rows at a time."""
        waiting = self.dispatcher.waiting
        if waiting == 0:
            return True  # workers are about to run dry
        if waiting < self.low_water:
            # Top up in chunks: half of what may be held at most, or a whole batch.
            full = self.claim_size(time.monotonic() - self.started, 0, 0)
            return size >= full // 2
        if self.dispatcher.starved() and time.monotonic() >= self.next_starved_claim:
            # A capped target leaves workers idle: look for rows to other targets, now and then.
            self.next_starved_claim = time.monotonic() + STARVED_CLAIM_INTERVAL
            return True
        return False

    def claim_size(self, elapsed: float, held: int, busiest: int) -> int:
        """Claim no more than the workers can finish before the budget runs out.

        With every endpoint stuck, rows take ceil(n / concurrency) timeouts, and the rows
        of one target ceil(n / TARGET_CONCURRENCY); capping the rows held (`held` in all,
        `busiest` for the target with the most, which the whole claim might join) keeps a
        tick close to its budget whatever the endpoints do.
        """
        waves = max(1, math.floor((self.budget - elapsed) / self.timeout))  # the timeout is positive
        return min(self.limit, self.concurrency * waves - held, self.target_concurrency * waves - busiest)

    def collect_finished(self) -> None:
        """File every outcome the workers handed back since the last look."""
        while True:
            try:
                job, outcome, attempts = self.results.get_nowait()
            except queue.Empty:
                break
            self.held -= 1
            if job.batch.add(outcome, attempts):
                self.finished.append(job.batch)
        self.hold_tripped()

    def hold_tripped(self) -> None:
        """A target that has just failed `failures` times in a row: its rows still waiting
        for a worker are held now, not sent into the same failure while the rest of their
        batch finishes (its circuit opens when the results are written back)."""
        tripped = self.flow.new_trips()
        if not tripped:
            return
        for job in self.dispatcher.withdraw(lambda job: self.flow.tripped_target(job.row, tripped) is not None):
            self.results.put((job, self.flow.hold_tripped(job.row, tripped, job.batch.now), []))

    def write_back(self, *, force: bool, last: bool = False) -> None:
        """Write finished batches back in one transaction, at most every WRITE_INTERVAL.

        Each write takes the database's write lock; on SQLite the host site's own writes
        wait for it, so a draining tick writes a few times a second, not once per batch.
        `force` writes at once (nothing in flight, or the tick is ending).

        `save_outcomes` retries a lost connection or deadlock itself. When it still fails,
        the batches wait for the next write, claiming stops, and the tick ends once what
        it holds is done; the `last` write that fails ends the tick with the error (see
        `abandon`).
        """
        if not self.finished or (not force and time.monotonic() < self.next_write):
            return
        batches, self.finished = self.finished, []
        counts = tallies.delivery_counts(o for b in batches for o in b.outcomes)
        try:
            services.save_outcomes(
                [(b.token, b.outcomes) for b in batches], [a for b in batches for a in b.attempts], counts
            )
        except reconnecting.DATABASE_ERRORS as exc:
            if last:
                self.abandon(batches)
                raise
            code = reconnecting.error_code(exc)
            logger.error("write-back failed; kept for the next one: %s (%s)", type(exc).__name__, code)
            self.finished = batches + self.finished
            self.failure = self.failure or exc
            self.next_write = time.monotonic() + WRITE_INTERVAL
            return
        telemetry.count_deliveries(counts)
        now = self.fixed_now or timezone.now()
        try:  # the breakers' bookkeeping: a missed observation must not fail a tick that wrote its rows
            written = [o for b in batches for o in b.outcomes]
            reconnecting.retry(lambda: self.flow.observe(written, now), "breakers")
        except reconnecting.DATABASE_ERRORS as exc:
            logger.error("circuit breakers not updated: %s", type(exc).__name__)
        self.next_write = time.monotonic() + WRITE_INTERVAL
        for batch in batches:
            services.announce(batch.outcomes)
            self.report.tally.update(o.kind for o in batch.outcomes)
            self.report.holds.update(o.detail for o in batch.outcomes if o.detail and o.detail.startswith(HELD))
            if self.on_outcome:
                for each in batch.outcomes:
                    self.on_outcome(each)

    def abandon(self, batches: list[Batch]) -> None:
        """The write-back gave up for good: release the rows of `batches` that were not sent
        (released, deferred or held: nothing went out), so they do not wait for the lease.

        Rows that were sent keep their claim: releasing them would make them due at once
        and send them again, the very duplicate the write-back's retries are there to
        avoid. Their outcome is lost with the database; when the lease ends another tick
        sends them again (at least once, as after a tick killed between send and write).
        """
        unsent = [o.row.pk for b in batches for o in b.outcomes if o.kind in (Kind.RELEASED, Kind.DEFERRED)]
        try:
            release_tokens([b.token for b in batches], only=unsent)
        except reconnecting.DATABASE_ERRORS:
            logger.error("%d unsent rows stay claimed until the lease ends", len(unsent))

    def record(self, job: Job, channel_results: list[ChannelResult]) -> tuple[Outcome, list[DeliveryAttempt]]:
        """The outcome of the channels' results, and one delivery record per channel."""
        assert job.firing is not None
        outcome = services.record_firing(job.row, channel_results, job.batch.now, self.policy)
        return outcome, attempt_records(job.firing, channel_results)

    def internal_error(self, job: Job, exc: Exception) -> Outcome:
        """An unexpected exception is a full failure of the row, so poison walks to the dead letters."""
        logger.exception("notification %s: internal error", job.row.pk)
        return services.record_internal_error(job.row, exc, job.batch.now, self.policy)

    def watch(self, job: Job, outcome: Outcome) -> None:
        """A worker's result, told to the breaker before the worker takes its next row."""
        self.flow.watch(outcome, self.fixed_now or job.batch.now)


def channel_targets(row: Notification) -> dict[str, str]:
    """channel -> its target, for the channels the row's firing owes."""
    return {channel: channel_target(row, channel) for channel in row.owed_channels}


def attempt_records(firing: Firing, results: list[ChannelResult]) -> list[DeliveryAttempt]:
    return [
        DeliveryAttempt(
            notification_id=firing.notification.pk,
            firing_id=firing.notification.firing_id,  # the UUID itself: no parsing of its text
            channel=r.channel,
            target=channel_target(firing.notification, r.channel),
            recipient=firing.notification.recipient,
            sent_to=clip(r.sent_to, SENT_TO_CHARS),
            summary=clip(r.summary, SUMMARY_CHARS),
            outcome=DeliveryAttempt.Outcome.OK if r.ok else DeliveryAttempt.Outcome.FAILED,
            error=r.error or "",
            error_class=r.error_class.value if r.error_class and not r.ok else "",
            http_status=r.http_status,
            duration_ms=round(r.duration * 1000),
            attempted_at=firing.fired_at,
        )
        for r in results
    ]


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


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
