"""One tick's pipeline: claim due rows, hand them to the workers, collect their outcomes.

Database work happens only in the calling thread and never inside a transaction that
waits on the network: a claim is one short transaction, delivery runs in worker threads
that touch no database (`workers`), and each batch is written back in one short
transaction fenced by the batch's claim token. Every statement the tick runs is asked of
one package, `notifications.store`.

Workers take claimed rows from a `Dispatcher` and hand back outcomes; meanwhile the
calling thread claims the next batch before the workers run dry and writes back each
batch as soon as its last row is done. The dispatcher keeps one queue per target
(webhook host, or email) and gives a free worker to the target with the fewest rows in
flight, so a stuck endpoint cannot hold every worker while rows to healthy ones wait.

A claimed row's way, in order: `store.next_batch` (loaded, checked, digests joined) ->
`take` (its targets, worked out once) -> `refuse` / `hold_back` (the holds of
`notifications.outcomes`) -> `store.file_due` (digests) -> `flow.recipients.screen` ->
`FlowControl.admit` -> the dispatcher -> a worker (send, settle) -> the dispatcher (the
breakers' `watch`) -> `collect_finished` -> `write_back` (`store.WriteBack`, then the
breakers, the signals and the report). docs/architecture.md tells it step by step.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

from notifications import outcomes, store
from notifications.channels import Channel, registry
from notifications.channels.holds import configuration_hold
from notifications.conf import TickSettings
from notifications.flow.control import FlowControl
from notifications.flow.recipients import give_back, screen
from notifications.flow.targets import RowTargets, dispatch_target, targets_by_channel
from notifications.models import DEFAULT_QUEUE, Notification
from notifications.outcomes import Outcome
from notifications.store import Claim
from notifications.tick import overruns
from notifications.tick.announce import announce
from notifications.tick.dispatch import Batch, Dispatcher, Job
from notifications.tick.report import HELD, TickReport
from notifications.tick.workers import Reported, Workers

logger = logging.getLogger("notifications.tick")

# How often the tick looks for sends that overran their deadline (+ DEADLINE_GRACE), and
# for claims to renew (`overruns.RENEW_AFTER`).
MONITOR_INTERVAL = 0.25
# How often the tick's own thread collects finished rows and tops up the queue.
POLL_INTERVAL = 0.005
# Claims take the database's write lock, which on SQLite is the host site's too: a
# draining tick tops up its queue in chunks (see `claim_wanted`), and claims only because
# a capped target leaves workers idle at most this often.
STARVED_CLAIM_INTERVAL = 0.5
# Claim the next batch while fewer than this many rows per worker wait, so the workers
# never run dry while a claim takes its turn at the database (a claim of 100 rows takes
# tens of milliseconds; 256 rows are 100 ms of sends at 2,500 a second). No more: every
# claim walks past the rows in hand in the due index, and each costs memory.
LOW_WATER_ROWS_PER_WORKER = 1
# Rows waiting in the dispatcher at most when a capped target leaves workers idle: this
# many batches, or this many rows per worker if that is more. Each waiting row holds a
# claim no other tick can take, so the tick looks past a stuck target only this far.
HIGH_WATER_BATCHES = 3
HIGH_WATER_ROWS_PER_WORKER = 4


def claim_size(settings: TickSettings, elapsed: float, in_hand: int, busiest: int) -> int:
    """Claim no more than the workers can finish before the budget runs out.

    With every endpoint stuck, rows take ceil(n / concurrency) timeouts, and the rows
    of one target ceil(n / TARGET_CONCURRENCY); capping the rows in hand (`in_hand` in all,
    `busiest` for the target with the most, which the whole claim might join) keeps a
    tick close to its budget whatever the endpoints do.
    """
    waves = max(1, math.floor((settings.budget - elapsed) / settings.channel_timeout))  # the timeout is positive
    return min(settings.limit, settings.concurrency * waves - in_hand, settings.target_concurrency * waves - busiest)


class Pipeline:
    """One run of a tick: its channels, flow control, workers and write-back, and the
    loop that claims, hands out and collects until nothing more is due or the budget is spent."""

    def __init__(
        self,
        settings: TickSettings,
        stop: threading.Event,
        report: TickReport,
        *,
        fixed_now: datetime | None,
        on_outcome: Callable[[Outcome], None] | None,
    ) -> None:
        self.settings = settings
        self.stop = stop
        self.report = report
        self.fixed_now = fixed_now
        self.started = time.monotonic()
        # The parts, made once per run.
        self.channels: dict[str, Channel] = registry.open_for_tick(settings)  # one instance per name
        self.flow = FlowControl(settings.lease)  # circuit breakers and rate limits
        self.dispatcher = Dispatcher(settings.concurrency, settings.target_concurrency, trips=self.flow)
        self.results: queue.SimpleQueue[Reported] = queue.SimpleQueue()
        self.workers = Workers(
            self.dispatcher,
            self.results,
            self.channels,
            timeout=settings.channel_timeout,
            concurrency=settings.concurrency,
            policy=settings.policy,
        )
        self.writes = store.WriteBack(settings.policy, settings.lease)
        self.holding: list[Batch] = []  # batches with rows in hand, whose claims the tick renews
        self.claimed_at = time.monotonic()  # when the last claim began
        self.left_behind: dict[Any, Job] = {}  # rows whose send still runs, until written back
        self.on_outcome = on_outcome
        # Claim the next batch while this many rows still wait, so workers never run dry;
        # claim up to `high_water` waiting rows when a capped target leaves workers idle.
        self.low_water = LOW_WATER_ROWS_PER_WORKER * settings.concurrency
        self.high_water = max(HIGH_WATER_BATCHES * settings.limit, HIGH_WATER_ROWS_PER_WORKER * settings.concurrency)
        # The state of the loop.
        self.in_hand = 0  # rows claimed and not yet given an outcome
        self.exhausted = False  # a claim came back short: nothing more is due
        self.digests_wanted = True  # digests may be due: see take
        self.next_starved_claim = self.next_check = time.monotonic()
        self.live_workers = 0  # started as claimed rows need them (see take), never stopped
        # The database error that ended claiming (retries spent): what is held is still
        # finished and written back, then the tick fails with it.
        self.failure: Exception | None = None

    def run(self) -> None:
        """Claim, deliver and write back until done; then close the workers and channels."""
        try:
            while True:
                self.reap_overdue()
                if self.stop.is_set():
                    self.release_waiting()
                if not self.claim_if_needed():
                    if self.in_hand == 0 and self.done_claiming():
                        break
                    # Poll rather than block on the queue: one wake-up per interval collects
                    # every row finished meanwhile, instead of one wake-up per row.
                    time.sleep(POLL_INTERVAL)
                # After a claim too: workers that take rows as fast as they are claimed must
                # not keep the finished ones from being written back until claiming ends.
                self.collect_finished()
                self.failure = self.failure or self.write_back(force=self.in_hand == 0)
            self.write_back(force=True, last=True)
            if self.failure is not None:
                raise self.failure
        finally:
            self.dispatcher.close()
            self.workers.close()
            for channel in self.channels.values():
                channel.close()

    # --- the loop's steps, in the order it takes them ---------------------------------------

    def start_worker(self) -> None:
        self.live_workers += 1
        self.workers.start()

    def reap_overdue(self) -> None:
        """Every MONITOR_INTERVAL: report sends that overran every deadline, replace their workers."""
        if time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + MONITOR_INTERVAL
        for job in self.workers.abandon_overdue():
            if job.detached:
                continue  # its worker went on to other rows: only its sends are left behind
            self.live_workers -= 1  # the stuck one is left behind and ends when its send returns...
            self.start_worker()  # ...so keep the concurrency
        self.keep_claims()

    def keep_claims(self) -> None:
        """Renew the claims of the rows in hand once half their lease has gone (a send may run
        as long as its channel's deadline, and rows wait for a worker meanwhile), and those of
        sends left running past their deadline (this tick's or an earlier one's in this
        process); hand back the rows whose send has returned."""
        now = time.monotonic()
        lease = self.settings.lease
        self.holding = [b for b in self.holding if b.left or b in self.writes.finished]
        due = [b for b in self.holding if now - b.renewed >= lease * overruns.RENEW_AFTER]
        running, returned = overruns.sweep(lease * overruns.RENEW_AFTER)
        if not (due or running or returned):
            return

        def renew() -> None:
            store.renew([b.token for b in due], lease)
            for each in running:
                store.renew([each.token], lease, only=[each.pk])

        try:
            store.retry(renew, "lease")
            for batch in due:
                batch.renewed = now
        except store.DATABASE_ERRORS as exc:  # tried again at the next look
            logger.error("claims not renewed: %s", type(exc).__name__)
            for each in running:
                each.renewed = 0.0

        def hand_back() -> None:
            for each in returned:
                store.release_tokens([each.token], only=[each.pk])

        try:
            store.retry(hand_back, "release")
        except store.DATABASE_ERRORS as exc:
            logger.error("claims of finished sends not handed back: %s", type(exc).__name__)
            overruns.put_back(returned)

    def release_waiting(self) -> None:
        """Stopping: rows no worker has started are handed back, due again at once (their
        throttle count too: they count when they go out)."""
        jobs = self.dispatcher.drain()
        by_batch: dict[Batch, list[Notification]] = {}
        for job in jobs:
            by_batch.setdefault(job.batch, []).append(job.row)
        for batch, rows in by_batch.items():  # in the window each batch counted them in
            self.give_back_counts(rows, batch.now)  # the rows go back whatever
        for job in jobs:
            self.results.put((job, outcomes.release(job.row, job.batch.now), []))

    def done_claiming(self) -> bool:
        """No more batches: stopping, nothing more due, or the budget is spent.

        The budget stops *new* batches: the first one is always claimed, so `--budget 0`
        means "one batch".
        """
        spent = time.monotonic() - self.started >= self.settings.budget and self.report.batches > 0
        return self.stop.is_set() or self.exhausted or spent or self.failure is not None

    def claim_if_needed(self) -> bool:
        """Claim the next batch when the workers need it; True if a claim was made."""
        elapsed = time.monotonic() - self.started
        size = (
            0 if self.done_claiming() else claim_size(self.settings, elapsed, self.in_hand, self.dispatcher.busiest())
        )
        more = size > 0 and self.dispatcher.waiting < self.high_water
        self.dispatcher.set_capped(more)
        if not more or self.flow.paused() or not self.claim_wanted(size):
            return False
        batch_now = self.fixed_now or timezone.now()
        self.claimed_at = time.monotonic()  # the claim's lease ends no earlier than this plus the lease
        try:
            # Lost connections and deadlocks retried; digests while they may be due (see take).
            claimed = store.next_batch(
                batch_now,
                size,
                self.settings.lease,
                with_digests=self.digests_wanted
                and (not self.settings.queues or DEFAULT_QUEUE in self.settings.queues),
                queues=self.settings.queues,
            )
        except store.DATABASE_ERRORS as exc:
            if not self.in_hand and not self.writes.finished:
                raise  # nothing to finish: the caller reports it
            self.give_up_claiming(exc)
            return False
        try:
            self.take(claimed, size, batch_now)
        except store.DATABASE_ERRORS as exc:
            # The batch never reached a worker: hand it back, due again at once.
            self.give_up_claiming(exc, release=claimed.token)
            return False
        return True

    def give_up_claiming(self, exc: Exception, release: uuid.UUID | None = None) -> None:
        """The database failed a claim beyond its retries: claim nothing more, but finish
        and write back the rows in hand (a tick that died here would leave them claimed
        until the lease ends and send them again). `release`: a batch claimed but never
        handed to a worker, released if the database lets us."""
        code = store.error_code(exc)
        logger.error("claim failed, no more claims this tick: %s (%s)", type(exc).__name__, code)
        self.failure = self.failure or exc
        if release is not None:
            try:
                store.retry(lambda: store.release_tokens([release]), "release")
            except store.DATABASE_ERRORS:
                logger.error("could not release a claimed batch: its rows wait for the lease to end")

    def take(self, claimed: Claim, size: int, batch_now: datetime) -> None:
        """Hand a claimed batch to the workers (rows held back, deferred and settled by
        recipients' choices get their outcomes at once; rows that could not be loaded are
        dead-lettered by the batch's write-back)."""
        self.exhausted = claimed.due < size
        if claimed.more_digests is not None:  # digests are claimed with the tick's first batch,
            # and again while more are due (a full claim of them, or one that filing closed)
            self.digests_wanted = claimed.more_digests
            self.exhausted = self.exhausted and not claimed.more_digests
        if claimed.size:
            self.report.batches += 1
        if claimed.rows or claimed.refused:
            self.hand_out(claimed, batch_now)
        elif claimed.unloadable:  # nothing to send: written back with the next write
            self.writes.finished.append(Batch(claimed.token, batch_now, 0, unloadable=claimed.unloadable))
        budget_left = self.settings.budget - (time.monotonic() - self.started)
        if self.exhausted and self.flow.pause_if_waiting(batch_now, budget_left):
            self.exhausted = False  # rows a rate limit deferred come due within the budget: wait for them

    def hand_out(self, claimed: Claim, batch_now: datetime) -> None:
        """The claimed rows through the holds, digests, recipients' choices and flow
        control, then those still to send to the dispatcher."""
        for channel in self.channels.values():
            channel.prepare(claimed.rows)  # e.g. the suppressed addresses: workers touch no database
        # Once per firing, carried on; asked of the tick's own channels, as everything is.
        rows = claimed.rows + [refused.row for refused in claimed.refused]
        targets = {row.pk: targets_by_channel(row, self.channels.get) for row in rows}
        ready, settled = self.hold_back(claimed.rows, batch_now)
        settled = [self.refuse(refused, batch_now) for refused in claimed.refused] + settled
        ready = self.file_for_digests(ready, claimed.token, batch_now)
        batch = Batch(
            claimed.token,
            batch_now,
            len(ready) + len(settled),
            unloadable=claimed.unloadable,
            targets=targets,
            renewed=self.claimed_at,
        )
        screened = screen(ready, self.channels, batch_now, targets)  # recipients' choices, throttles
        batch.attempts += screened.attempts
        for row in screened.send:  # a row some recipients' choices left owing fewer channels
            targets[row.pk] = {name: targets[row.pk][name] for name in row.owed_channels}
        try:
            send, deferred = self.flow.admit(screened.send, batch_now, targets)  # open circuits, rate limits
        except store.DATABASE_ERRORS:
            self.give_back_counts(screened.send, batch_now)  # counted by `screen`, not sent after all
            raise
        # Counted in hand (and held, for the claims' renewal) only now, with nothing left to
        # fail before the rows reach a worker or an outcome: a database error above hands the
        # batch back (`give_up_claiming`), and a row counted but never handed on would keep
        # the tick waiting for it for good.
        self.in_hand += len(ready) + len(settled)
        if batch.left:
            self.holding.append(batch)
        if not batch.left and batch.unloadable:  # every loadable row joined a digest
            self.writes.finished.append(batch)
        for outcome in settled + screened.settled + deferred:
            self.results.put((Job(batch, outcome.row, ""), outcome, []))
        self.dispatcher.put(
            [
                Job(batch, row, dispatch_target(row, targets[row.pk], self.channels.get), targets=targets[row.pk])
                for row in send
            ]
        )
        # Threads as the rows need them, up to CONCURRENCY: a tick of a few rows starts a few.
        for _ in range(self.dispatcher.useful_workers() - self.live_workers):
            self.start_worker()

    def give_back_counts(self, rows: list[Notification], now: datetime) -> None:
        """Throttle counts `screen` took for `rows` at `now`, given back: the rows go back unsent."""
        try:
            store.retry(lambda: give_back(rows, now), "throttle")
        except store.DATABASE_ERRORS as exc:
            logger.error("throttle counts not given back: %s", type(exc).__name__)

    def refuse(self, refused: store.Refused, now: datetime) -> Outcome:
        """A claimed row unfit to send: dead-lettered saying why (written around validation),
        or an internal error (its check raised). Settled before flow control, as held rows are."""
        if refused.error is not None:
            return outcomes.settle_internal_error(refused.row, refused.error, now, self.settings.policy)
        return outcomes.settle_invalid(refused.row, refused.reason, now, self.settings.policy)

    def hold_back(self, rows: list[Notification], now: datetime) -> tuple[list[Notification], list[Outcome]]:
        """Rows that may go now, and outcomes for those that must not: too late, inside quiet
        hours, held for a setting. Settled before flow control, so they take no rate-limit
        slot and are never a circuit's probe."""
        policy = self.settings.policy
        ready, settled = [], []
        for row in rows:
            try:
                hold = outcomes.held_back(row, now, self.settings)
                if hold is None and (trouble := configuration_hold(row, self.channels.get, self.settings)):
                    hold = outcomes.held_for_setting(trouble, now)
            except Exception as exc:  # a poison row costs only itself
                logger.exception("notification %s: internal error", row.pk)
                settled.append(outcomes.settle_internal_error(row, exc, now, policy))
                continue
            if hold is None:
                ready.append(row)
            else:
                settled.append(outcomes.settle_held(row, hold, now))
        return ready, settled

    def file_for_digests(self, rows: list[Notification], token: uuid.UUID, now: datetime) -> list[Notification]:
        """Rows that wait for a digest join one (written at once, claim released, no outcome);
        the rest go on. A digest due now (its window over, or full) is claimed next."""
        filing = store.file_due(rows, now, token)
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
            full = claim_size(self.settings, time.monotonic() - self.started, 0, 0)
            return size >= full // 2
        if self.dispatcher.starved() and time.monotonic() >= self.next_starved_claim:
            # A capped target leaves workers idle: look for rows to other targets, now and then.
            self.next_starved_claim = time.monotonic() + STARVED_CLAIM_INTERVAL
            return True
        return False

    def collect_finished(self) -> None:
        """File every outcome the workers handed back since the last look, with the
        delivery log's records of its sends."""
        while True:
            try:
                job, outcome, logged = self.results.get_nowait()
            except queue.Empty:
                break
            self.in_hand -= 1
            if outcome.still_sending:
                self.left_behind[outcome.row.pk] = job
            if job.batch.add(outcome, store.attempt_records(job.firing, logged, job.targets) if logged else []):
                self.writes.finished.append(job.batch)
        self.hold_tripped()

    def hold_tripped(self) -> None:
        """A target that has just failed `failures` times in a row: its rows still waiting
        for a worker are held now, not sent into the same failure while the rest of their
        batch finishes (its circuit opens when the results are written back)."""
        tripped = self.flow.new_trips()
        if not tripped:
            return
        for job in self.dispatcher.withdraw(lambda job: self.flow.tripped_target(job.targets, tripped) is not None):
            self.results.put((job, self.flow.hold_tripped(job.row, job.targets, tripped, job.batch.now), []))

    def write_back(self, *, force: bool, last: bool = False) -> Exception | None:
        """Ask the store to write the finished batches back (see `store.WriteBack.write`),
        then tell the breakers, the signals' listeners and the report what was written.
        Returns the database error that kept the batches for the next write."""
        written = self.writes.write(force=force, last=last)
        if not written.batches:
            return written.error
        if written.dead:  # rows the claims could not load
            self.report.tally[outcomes.Kind.DEAD_LETTERED] += written.dead
        self.observe(written.outcomes, {pk: t for b in written.batches for pk, t in b.targets.items()})
        for batch in written.batches:
            for each in batch.outcomes:  # claims kept by the write-back: renewed until the send returns
                if each.still_sending and (job := self.left_behind.pop(each.row.pk, None)) is not None:
                    overruns.leave(each.row.pk, batch.token, job)
            announce(batch.outcomes)
            self.report.tally.update(o.kind for o in batch.outcomes)
            self.report.holds.update(o.detail for o in batch.outcomes if o.detail and o.detail.startswith(HELD))
            if self.on_outcome:
                for each in batch.outcomes:
                    self.on_outcome(each)
        return None

    def observe(self, written: list[Outcome], targets: RowTargets) -> None:
        """The breakers' bookkeeping, and the rows held for a target that is open no more
        made due: a missed observation must not fail a tick that wrote its rows."""
        now = self.fixed_now or timezone.now()

        def observe() -> None:
            for key in self.flow.observe(written, now, targets):
                store.release_held(key, now)

        try:
            store.retry(observe, "breakers")
        except store.DATABASE_ERRORS as exc:
            logger.error("circuit breakers not updated: %s", type(exc).__name__)
