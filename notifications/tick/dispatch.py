"""Claimed rows on their way to a worker: batches, jobs, and one queue per target.

A stuck endpoint must not hold every worker while rows to healthy ones wait, and a
burst to one receiver must not open every connection the tick has to it, so rows queue
per target (webhook host, or email), a free worker takes the target with the fewest
rows in flight, and no target has more than NOTIFICATIONS_TARGET_CONCURRENCY in flight.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Container, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from notifications.channels import ChannelResult, Firing
from notifications.models import DeliveryAttempt, Notification
from notifications.outcomes import Outcome

logger = logging.getLogger("notifications.tick")


class Trips(Protocol):
    """The circuit breakers as the dispatcher sees them (`FlowControl`): the targets no row
    may start to now, and each finished row's results, told before its worker picks again."""

    @property
    def tripped(self) -> Container[str]: ...

    def watch(self, outcome: Outcome, now: datetime, targets: Mapping[str, str]) -> None: ...


class Untripped:
    """No breaker: every target may start (a dispatcher on its own, in tests)."""

    tripped: Container[str] = frozenset()

    def watch(self, outcome: Outcome, now: datetime, targets: Mapping[str, str]) -> None:
        pass


# One worker in this many (at least one) is never given to a single target while the tick
# may still claim rows for others, so rows behind a stuck endpoint leave workers free.
RESERVED_WORKER_RATIO = 4


@dataclass(eq=False)
class Batch:
    """One claim: its token fences the write-back, done when every row has an outcome. The
    rows it could not load (`unloadable`, pk -> why) are dead-lettered by its write-back."""

    token: uuid.UUID
    now: datetime
    left: int
    outcomes: list[Outcome] = field(default_factory=list)
    attempts: list[DeliveryAttempt] = field(default_factory=list)
    unloadable: dict[Any, str] = field(default_factory=dict)
    # row pk -> channel -> target (`notifications.flow.targets`), worked out once at the claim
    targets: dict[Any, dict[str, str]] = field(default_factory=dict)
    renewed: float = 0.0  # monotonic time its claim was made (just before) or last renewed

    def add(self, outcome: Outcome, attempts: list[DeliveryAttempt]) -> bool:
        """File one row's outcome; True once the batch is complete."""
        self.outcomes.append(outcome)
        self.attempts.extend(attempts)
        self.left -= 1
        return not self.left


@dataclass(eq=False)
class Job:
    """One claimed row on its way through a worker.

    Whoever first takes `settled` (a non-blocking lock) reports the row's outcome: the
    worker when the send returns, or the tick's monitor when the send has overrun its
    deadline; the other side then drops what it has.
    """

    batch: Batch
    row: Notification
    target: str
    firing: Firing | None = None  # set by the worker once validation passed and sending begins
    outcome: Outcome | None = None  # set by whoever settled the row, before the dispatcher hears it finished
    started: float = 0.0  # monotonic time the worker began the row (set by the dispatcher)
    results: dict[str, ChannelResult] = field(default_factory=dict)  # channels finished so far
    # channel -> where it delivers (`notifications.flow.targets`), for the firing's spans
    targets: dict[str, str] = field(default_factory=dict)
    settled: threading.Lock = field(default_factory=threading.Lock)
    # True once its worker is done with the row (a flag, not an Event: nothing waits on it,
    # and a claim makes hundreds of jobs); `pooled`: its sends on the pool's threads.
    returned: bool = False
    pooled: list[Future[Any]] = field(default_factory=list)
    # Its sends were started without holding its worker (`Workers.detach`): the last to end
    # settles it, and its worker went on to another row.
    detached: bool = False

    def settle(self) -> bool:
        """Take the one right to report this row's outcome; False if it is taken."""
        return self.settled.acquire(blocking=False)

    def sending(self) -> bool:
        """Whether a send of this row may still be running (one the monitor left behind)."""
        return not self.returned or not all(future.done() for future in self.pooled)


class Dispatcher:
    """Claimed rows waiting for a worker, one queue per target; thread-safe.

    A free worker takes the oldest row of the target with the fewest rows in flight.
    No target ever has more than `target_cap` rows in flight (a burst to one receiver
    opens at most that many connections to it). While the tick may still claim rows for
    other targets, no target holds more than `cap` workers either (three quarters of
    them), so rows behind a stuck endpoint leave workers free and the tick claims
    further; `set_capped(False)` lifts that second limit when it cannot.
    """

    def __init__(self, workers: int, target_cap: int | None = None, *, trips: Trips | None = None) -> None:
        self.workers = workers
        self.trips = trips or Untripped()  # the breakers: told what finished, asked what may start
        self.cap = max(1, workers - max(1, workers // RESERVED_WORKER_RATIO))
        self.target_cap = target_cap or workers
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Job]] = {}
        self._running: Counter[str] = Counter()
        self._rows_per_target: Counter[str] = Counter()  # rows per target, waiting or running
        self._started: set[Job] = set()  # rows a worker is delivering
        self._limit = min(self.cap, self.target_cap)  # rows in flight per target now
        self._closed = False
        self.waiting = 0  # rows queued (read without the lock: a hint)
        self.idle = 0  # workers waiting for a row
        # Workers woken and not yet back at their pick. A finished row wakes one only when
        # none is on its way: a worker whose row's sends hold no thread (detached) comes
        # straight back for the next, so the rows that finished sends make startable are
        # taken by one worker, not each by a woken one; a worker about to hold its thread
        # in a send wakes the next (`pass_on`). A claim wakes as many as may start.
        self._waking = 0

    def put(self, jobs: list[Job]) -> None:
        with self._cond:
            for job in jobs:
                self._queues.setdefault(job.target, deque()).append(job)
                self._rows_per_target[job.target] += 1
            self.waiting += len(jobs)
            # As many as may start now: rows whose sends hold a thread each need a worker,
            # and those of detached sends are taken by the first to come (the rest go back).
            self._wake(min(len(jobs), self.workers - len(self._started)))

    def take(self, finished: Job | None = None) -> Job | None:
        """Block until a row may start; None once the dispatcher is closed.

        A worker passes the row it just finished (one lock round trip instead of two).
        """
        if finished is not None:
            self._watch(finished)
        with self._cond:
            if finished is not None:
                # No wake-up for another worker: only this row's target can have become
                # startable (workers idle only while no target is), and this one picks next.
                self._finish(finished)
            while not self._closed:
                # Rows in flight stay within `workers` even when sends hold no worker (detached).
                target = self._pick() if len(self._started) < self.workers else None
                if target is not None:
                    jobs = self._queues[target]
                    job = jobs.popleft()
                    if not jobs:
                        del self._queues[target]
                    self._running[target] += 1
                    self._started.add(job)
                    self.waiting -= 1
                    job.started = time.monotonic()
                    return job
                self.idle += 1
                self._cond.wait()
                self.idle -= 1
                self._waking = max(0, self._waking - 1)
            return None

    def done(self, job: Job) -> None:
        """A row finished outside a worker's `take` (the monitor gave up on it)."""
        self._watch(job)
        with self._cond:
            self._finish(job)
            self._wake_one()  # its target may start its next row

    def pass_on(self) -> None:
        """A worker is about to hold its thread in a send: wake another for the rows waiting."""
        with self._cond:
            self._wake_one()

    def _wake_one(self) -> None:
        if not self._waking:
            self._wake(1)

    def _wake(self, workers: int) -> None:
        """Wake up to `workers` idle workers for the rows waiting, beside those woken already."""
        woken = min(workers, self.idle - self._waking) if self.waiting else 0
        if woken > 0:
            self._waking += woken
            self._cond.notify(woken)

    def _watch(self, job: Job) -> None:
        """A row is done: its results go to the breakers before its worker picks again (and
        outside the lock the workers pick with), so no further send starts to a target
        that has just failed again and again."""
        if job.outcome is None:
            return
        try:
            self.trips.watch(job.outcome, job.batch.now, job.targets)
        except Exception:  # the tick waits for every claimed row: its outcome goes back whatever
            logger.exception("notification %s: the circuit breaker could not take its outcome", job.row.pk)

    def _finish(self, job: Job) -> None:
        self._running[job.target] -= 1
        self._release(job.target, 1)
        self._started.discard(job)

    def _release(self, target: str, rows: int) -> None:
        left = self._rows_per_target[target] - rows
        if left > 0:
            self._rows_per_target[target] = left
        else:
            del self._rows_per_target[target]  # so that busiest() looks at targets with rows only

    def _pick(self) -> str | None:
        best, best_running = None, 0
        limit, counts, tripped = self._limit, self._running, self.trips.tripped  # read once: called per row
        for target in self._queues:
            running = counts[target]
            if running >= limit or target in tripped:
                continue
            if best is None or running < best_running:
                best, best_running = target, running
                if running == 0:
                    break
        return best

    def overdue(self, now: float, allowed: Callable[[Job], float]) -> list[Job]:
        """Rows still running longer after their delivery started than `allowed(job)` seconds."""
        with self._cond:
            return [job for job in self._started if job.started + allowed(job) < now]

    def starved(self) -> bool:
        """Workers are free although rows wait: every waiting row's target is at its cap."""
        with self._cond:
            return len(self._started) < self.workers and self.waiting > 0 and self._pick() is None

    def busiest(self) -> int:
        """The most rows one target has, waiting or in flight (what bounds the next claim)."""
        with self._cond:
            return max(self._rows_per_target.values(), default=0)

    def useful_workers(self) -> int:
        """Workers the rows in hand can keep busy: up to `target_cap` per target, `workers` in all."""
        with self._cond:
            return min(self.workers, sum(min(rows, self.target_cap) for rows in self._rows_per_target.values()))

    def set_capped(self, capped: bool) -> None:
        with self._cond:
            limit = min(self.cap, self.target_cap) if capped else self.target_cap
            if limit != self._limit:
                self._limit = limit
                self._cond.notify_all()

    def withdraw(self, doomed: Callable[[Job], bool]) -> list[Job]:
        """Take the waiting rows `doomed` picks out (their target's circuit is opening)."""
        with self._cond:
            taken: list[Job] = []
            for target in list(self._queues):
                queued = self._queues[target]
                kept = deque(job for job in queued if not doomed(job))
                if len(kept) == len(queued):
                    continue
                taken += [job for job in queued if doomed(job)]
                self._release(target, len(queued) - len(kept))
                if kept:
                    self._queues[target] = kept
                else:
                    del self._queues[target]
            self.waiting -= len(taken)
            return taken

    def drain(self) -> list[Job]:
        """Take every waiting row out (the tick is stopping: they are released)."""
        with self._cond:
            jobs = [job for jobs in self._queues.values() for job in jobs]
            for target, queued in self._queues.items():
                self._release(target, len(queued))
            self._queues.clear()
            self.waiting = 0
            return jobs

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
