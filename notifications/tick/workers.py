"""The worker threads of a tick: take a claimed row, send its channels under their
deadlines, settle its outcome, hand it back.

Each channel's deadline is its own (`Channel.timeout`: NOTIFICATIONS_CHANNEL_TIMEOUT unless
the channel declares another); the workers and the monitor allow a row what its channels
declare, and name no channel.

Nothing here reaches the database (an import-linter contract of `make check` says so):
what a row's results come to is `notifications.outcomes.settling`'s, in memory. A worker
hands a row back (`hand_back`) and tells the dispatcher it finished when it takes its
next one: the dispatcher tells the breakers first. The tick's own thread turns the
results handed back into the delivery log's records and asks the store to write them.
"""

from __future__ import annotations

import functools
import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from notifications.channels import Channel, ChannelResult, ErrorClass, Firing, results
from notifications.outcomes import settling
from notifications.tick.pool import DaemonPool

if TYPE_CHECKING:
    from notifications.conf import Policy
    from notifications.outcomes import Outcome
    from notifications.tick.dispatch import Dispatcher, Job

logger = logging.getLogger("notifications.tick")

# Extra wait beyond a channel's deadline before a send that ignores it (a backend with no
# timeout of its own) is reported as timed out and left behind.
DEADLINE_GRACE = 1.0
# Threads for a row's further channels, per worker, at least: a worker sends a row's first
# channel itself and the others through this pool (as many threads per worker as there are
# channels), so all but one are busy at a time; the spare is for sends the monitor left
# behind past their deadline, which keep their thread until they return. Threads start
# only as sends need them.
CHANNEL_THREADS_PER_WORKER = 2
# What a worker (or the monitor) hands back for one row: its outcome, and the channel
# results the delivery log records (none when the row was not settled from its sends).
Reported = tuple["Job", "Outcome", "list[ChannelResult]"]


class Workers:
    """The threads that deliver a tick's rows, started as claimed rows need them."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        results: queue.SimpleQueue[Reported],
        channels: dict[str, Channel],
        *,
        timeout: float,
        concurrency: int,
        policy: Policy,
    ) -> None:
        self.dispatcher = dispatcher
        self.results = results
        self.channels = channels
        self.timeout = timeout  # a channel's deadline when it declares none (CHANNEL_TIMEOUT)
        self.policy = policy  # retries and backoff, for the outcome rules
        self.tracking = {name for name, channel in channels.items() if channel.tracks_recipients}
        per_worker = max(CHANNEL_THREADS_PER_WORKER, len(channels))
        self.pool = DaemonPool(per_worker * concurrency, "notifications-send")
        self.names = itertools.count()

    def start(self) -> None:
        threading.Thread(
            target=self.work,
            name=f"notifications-row-{next(self.names)}",
            daemon=True,  # a worker stuck past every deadline must not keep the process alive
        ).start()

    def close(self) -> None:
        self.pool.shutdown()

    def work(self) -> None:
        """A worker thread: take a row, deliver it, hand back its outcome. No database.

        Returns (ending the thread) when the dispatcher closes, or when the monitor gave
        up on its row: a replacement has been started by then.
        """
        finished = None
        while (job := self.dispatcher.take(finished)) is not None:
            finished = None
            try:
                reported = self.attempt(job)
            finally:
                job.returned = True  # its sends in this thread are over (`Job.sending`)
            if reported is None:
                if job.detached:
                    continue  # its sends settle it when they end (`detach`)
                return  # the monitor reported this row as timed out
            self.hand_back(job, *reported)
            finished = job  # marked done by the next take()

    def hand_back(self, job: Job, outcome: Outcome, logged: list[ChannelResult]) -> None:
        """Hand a delivered row's outcome to the tick; the dispatcher hears of it (and tells
        the breakers) when the row is marked finished."""
        job.outcome = outcome
        self.results.put((job, outcome, logged))

    def attempt(self, job: Job) -> tuple[Outcome, list[ChannelResult]] | None:
        """Deliver one row: its outcome and the results to log, or None when
        the monitor settled the row first. Whoever settles a job computes its outcome
        (which changes the row in memory); the other side drops what it has.

        Rows reach it validated and due to go (`hold_back`)."""
        mine = False
        try:
            job.firing = Firing(
                job.row, str(job.row.firing_id), timezone.now(), job.row.owed_channels, targets=job.targets
            )
            if self.detachable(job.firing):
                job.detached = True
                self.detach(job)
                return None
            self.dispatcher.pass_on()  # this thread is held until the row's sends end
            channel_results = self.deliver(job)
            mine = job.settle()
            if not mine:
                return None
            outcome, logged = self.outcome_of(job, channel_results)
            # A channel left behind on the pool past its deadline: the row stays claimed.
            outcome.still_sending = not all(future.done() for future in job.pooled)
            return outcome, logged
        except Exception as exc:  # noqa: BLE001 - logged by internal_error()
            if not mine and not job.settle():
                return None
            return self.internal_error(job, exc), []

    def detachable(self, firing: Firing) -> bool:
        """Whether every channel of `firing` starts its send without holding a thread (and
        the row sends them all at once): the worker then starts them and takes its next row."""
        if not firing.channels or firing.notification.routing == "first":
            return False
        return all(getattr(self.channels.get(name), "asynchronous", False) for name in firing.channels)

    def detach(self, job: Job) -> None:
        """Start every channel of a detachable row; the last one to end settles the row and
        hands it back, in whichever thread it ends (the channel's own)."""
        firing = job.firing
        assert firing is not None
        left = len(firing.channels)
        lock = threading.Lock()

        def ended(name: str, future: Future[ChannelResult]) -> None:
            nonlocal left
            job.results[name] = self.result_of(name, future)
            with lock:
                left -= 1
                if left:
                    return
            # Every send has ended (`Job.sending`); and a future keeps its callbacks, which
            # hold the job: letting go of them frees the job without the collector.
            job.pooled.clear()
            self.settle_detached(job)

        for name in firing.channels:
            future = self.channels[name].start(firing)
            job.pooled.append(future)
            future.add_done_callback(functools.partial(ended, name))

    def settle_detached(self, job: Job) -> None:
        """A detached row's sends have all ended: settle it (unless the monitor did), hand it
        back, and tell the dispatcher, which a worker's next `take` does for the others."""
        mine = False
        try:
            mine = job.settle()
            if not mine:
                return
            firing = job.firing
            assert firing is not None
            outcome, logged = self.outcome_of(job, [job.results[name] for name in firing.channels])
        except Exception as exc:  # noqa: BLE001 - logged by internal_error()
            if not mine and not job.settle():
                return
            outcome, logged = self.internal_error(job, exc), []
        self.hand_back(job, outcome, logged)
        self.dispatcher.done(job)

    def outcome_of(self, job: Job, channel_results: list[ChannelResult]) -> tuple[Outcome, list[ChannelResult]]:
        """What the channels' results come to, and the results the delivery log records."""
        outcome = settling.settle_firing(job.row, channel_results, job.batch.now, self.policy, self.tracking)
        return outcome, channel_results

    def internal_error(self, job: Job, exc: Exception) -> Outcome:
        """An unexpected exception is a full failure of the row, so poison walks to the dead letters."""
        logger.exception("notification %s: internal error", job.row.pk)
        return settling.settle_internal_error(job.row, exc, job.batch.now, self.policy)

    def deliver(self, job: Job) -> list[ChannelResult]:
        """The row's channels in parallel: the first in this thread, any others in the pool.

        A send that ignores its own deadline (a hanging DNS lookup, an email backend
        with no timeout) is not waited for: the tick's monitor reports the row as timed
        out at its channels' deadline + DEADLINE_GRACE and starts another worker.
        """
        firing = job.firing
        assert firing is not None
        if firing.notification.routing == "first":
            return self.deliver_in_turn(job)
        first, *others = firing.channels
        futures = {self.launch(name, firing): name for name in others}
        job.pooled.extend(futures)
        job.results[first] = self.send(first, firing)
        if futures:
            longest = max(self.deadline(name) for name in others)
            remaining = job.started + longest + DEADLINE_GRACE - time.monotonic()
            done, _ = wait(futures, timeout=max(remaining, 0))
            for future, name in futures.items():
                if future in done:
                    job.results[name] = self.result_of(name, future)
                else:
                    future.cancel()
        return [job.results.get(name) or self.timed_out(name) for name in firing.channels]

    def send(self, name: str, firing: Firing) -> ChannelResult:
        """Channel `name`'s send of `firing` in this thread, as the tick may store it."""
        try:
            result: object = self.channels[name].send(firing)
        except Exception as exc:  # noqa: BLE001 - a site's own send() may break the contract
            result = exc
        return results.received(name, result)

    def launch(self, name: str, firing: Firing) -> Future[Any]:
        """Channel `name`'s send of `firing` begun elsewhere: by the channel itself when it is
        `asynchronous`, else on the pool's threads. Its result is read by `result_of`."""
        channel = self.channels[name]
        return channel.start(firing) if channel.asynchronous else self.pool.submit(channel.send, firing)

    def result_of(self, name: str, future: Future[Any]) -> ChannelResult:
        """A launched send's result as the tick may store it: whatever the channel (or the
        server behind it) answered is cleaned and bounded here, and here only
        (`channels.results.received`)."""
        try:
            result: object = future.result()
        except Exception as exc:  # noqa: BLE001 - a site's own send() may break the contract
            result = exc
        return results.received(name, result)

    def deliver_in_turn(self, job: Job) -> list[ChannelResult]:
        """Routing `first`: the channels in the order listed, each under its own deadline,
        until one succeeds; those after it are not sent. The results of those tried.

        Each send runs in the pool and is waited for until its deadline (plus the grace):
        a channel that ignores it is reported as timed out and left behind, and the next
        channel is called (the monitor allows a row routed `first` a deadline per channel)."""
        firing = job.firing
        assert firing is not None
        tried = []
        for name in firing.channels:
            future = self.launch(name, firing)
            job.pooled.append(future)
            done, _ = wait([future], timeout=self.deadline(name) + DEADLINE_GRACE)
            if not done:
                future.cancel()
            result = job.results[name] = self.result_of(name, future) if done else self.timed_out(name)
            tried.append(result)
            if result.ok:
                break
        return tried

    def deadline(self, name: str) -> float:
        """Seconds one send of channel `name` may take: the deadline the channel declares."""
        channel = self.channels.get(name)
        return channel.timeout if channel is not None else self.timeout

    def allowed(self, job: Job) -> float:
        """Seconds a row's delivery may take before the monitor reports it: its channels at
        once take the longest deadline of them; a row routed `first` may try each in turn."""
        names = job.firing.channels if job.firing is not None else job.row.owed_channels
        deadlines = [self.deadline(name) + DEADLINE_GRACE for name in names] or [self.timeout + DEADLINE_GRACE]
        return sum(deadlines) if job.row.routing == "first" else max(deadlines)

    def abandon_overdue(self) -> list[Job]:
        """Report rows whose sends overran every deadline as timed out; return them (their
        sends may still be running: `Job.sending` says until when)."""
        abandoned = []
        for job in self.dispatcher.overdue(time.monotonic(), self.allowed):
            if not job.settle():
                continue  # its worker is reporting it right now
            try:
                outcome, logged = self.overran(job)
            except Exception as exc:  # noqa: BLE001 - logged by internal_error()
                outcome, logged = self.internal_error(job, exc), []
            logger.warning("notification %s: a send overran its deadline; left behind", job.row.pk)
            outcome.still_sending = job.sending()  # its row stays claimed while it runs
            self.hand_back(job, outcome, logged)
            self.dispatcher.done(job)
            abandoned.append(job)
        return abandoned

    def overran(self, job: Job) -> tuple[Outcome, list[ChannelResult]]:
        """A row whose worker is stuck: what finished counts, the rest timed out."""
        if job.firing is None:  # stuck before sending (validation): nothing went out
            raise TimeoutError(f"not started within {self.timeout:g}s")
        if job.row.routing == "first":  # those tried in turn, then the one it is stuck in
            tried: list[ChannelResult] = []
            for name in job.firing.channels:
                result = job.results.get(name)
                tried.append(result or self.timed_out(name))
                if result is None or result.ok:
                    break
            return self.outcome_of(job, tried)
        return self.outcome_of(job, [job.results.get(name) or self.timed_out(name) for name in job.firing.channels])

    def timed_out(self, name: str) -> ChannelResult:
        deadline = self.deadline(name)
        return ChannelResult(name, f"{name}: timed out after {deadline:g}s", ErrorClass.TRANSIENT, duration=deadline)
