"""Flow control for one tick: circuit breakers and rate limits between claim and send.

`FlowControl.admit` takes a claimed batch and says which rows go to the workers; the
others become `deferred` outcomes right away (not sent, no retry spent, no attempt
logged) and are written back with the batch: rows behind an open circuit are due again
at its `retry_at` and carry `held_for` (so closing it releases them at once), rows over
a rate limit at the slot their target will have a token for them. Either way the due
index does not meet them again before then. `FlowControl.observe` feeds each written-back
batch's channel results to the breakers. Both run in the tick's thread.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from notifications import outcomes
from notifications.flow import recipients
from notifications.flow.breaker import Breaker, BreakerSettings
from notifications.flow.ratelimit import Limit, limits_for, read_limits, take
from notifications.flow.targets import RowTargets, Targets, distinct
from notifications.models import Notification
from notifications.outcomes import Outcome

# Seconds a limit-deferred row's slot is still waited for after it came due: more than the
# write-back's WRITE_INTERVAL (`notifications.store.writeback`), the longest a deferred row waits for its write-back.
SLOT_GRACE = 1.0
RECHECK = 0.05  # seconds between claims while a slot that came due has not been claimed


class FlowControl:
    """The breakers and limits as one tick sees them (settings read once, at its start)."""

    def __init__(self, probe_lease: float) -> None:
        self.breaker = Breaker(BreakerSettings.read(), probe_lease)
        self.limits = read_limits()
        self.slots: list[float] = []  # heap: slots of the rows this tick deferred by a limit (Unix s)
        self.paused_until = 0.0  # monotonic: claim nothing before (rows wait for their slots)

    def admit(
        self, rows: Sequence[Notification], now: datetime, targets: RowTargets
    ) -> tuple[list[Notification], list[Outcome]]:
        """Rows to send now, and outcomes for the rows that are not sent now (`targets`: each
        row's, as the tick worked them out)."""
        admission = self.breaker.admit(rows, now, targets)
        deferred = [
            outcomes.defer(row, until, now, f"circuit open for {key}", held_for=key)
            for row, until, key in admission.held
        ]
        # Probes first: a rate limit must not leave a probe waiting.
        send = sorted(admission.send, key=lambda row: row.pk not in admission.probes)
        if self.limits:
            send, limited = self._limit(send, now, targets)
            deferred += limited
        recipients.give_back([outcome.row for outcome in deferred], now)  # counted when they go
        for row in send:
            row.held_for = None  # written back with the row's outcome
        return send, deferred

    def _limit(
        self, rows: list[Notification], now: datetime, targets: RowTargets
    ) -> tuple[list[Notification], list[Outcome]]:
        """Take tokens for the batch, one statement per bucket of each limited target."""
        demand: dict[str, int] = defaultdict(int)
        limited: dict[Any, list[tuple[str, tuple[Limit, ...]]]] = {}
        for row in rows:
            mine = [(t, limits) for t in distinct(targets[row.pk]) if (limits := limits_for(self.limits, t))]
            limited[row.pk] = mine
            for target, _ in mine:
                demand[target] += 1
        stamp = now.timestamp()
        grants = {target: take(target, limits_for(self.limits, target), n, stamp) for target, n in demand.items()}
        used: dict[str, int] = defaultdict(int)
        late: dict[str, int] = defaultdict(int)  # rows left over per target, for their slots
        send, deferred = [], []
        for row in rows:
            over = [t for t, _ in limited[row.pk] if used[t] >= grants[t].granted]
            for target, _ in limited[row.pk]:
                used[target] += 1
            if not over:
                send.append(row)
                continue
            slot = max(grants[t].next_at + late[t] / grants[t].rate for t in over)
            for target in over:
                late[target] += 1
            heapq.heappush(self.slots, slot)
            until = datetime.fromtimestamp(slot, UTC)
            deferred.append(outcomes.defer(row, until, now, f"rate limit of {', '.join(over)}"))
        return send, deferred

    def pause_if_waiting(self, now: datetime, budget_left: float) -> bool:
        """Nothing more is due now: True (and claim nothing until then) if rows deferred by a
        limit come due within the budget, so the tick waits for them instead of ending."""
        # A slot that came due lately may still be this tick's own row, deferred but not yet
        # written back (so not due to the claim that came back short): keep it a little and
        # look again, rather than end and leave the row to the next tick.
        while self.slots and self.slots[0] <= now.timestamp() - SLOT_GRACE:
            heapq.heappop(self.slots)  # long due: taken by another tick, or by this one already
        if not self.slots:
            return False
        wait = max(self.slots[0] - now.timestamp(), RECHECK)
        if wait >= budget_left:
            return False
        self.paused_until = time.monotonic() + wait
        return True

    def paused(self) -> bool:
        return time.monotonic() < self.paused_until

    def watch(self, outcome: Outcome, now: datetime, targets: Targets) -> None:
        """One row's results, as its worker hands them back (`Breaker.watch`)."""
        self.breaker.watch(outcome, now, targets)

    @property
    def tripped(self) -> dict[str, datetime]:
        """The targets this tick saw fail `failures` times in a row: no more sends start to them."""
        return self.breaker.tripped

    def new_trips(self) -> dict[str, datetime]:
        """Targets tripped since the last call, with until when their waiting rows are held
        (`hold_tripped`) rather than sent into the same failure."""
        return self.breaker.take_new_trips()

    @staticmethod
    def tripped_target(targets: Targets, tripped: dict[str, datetime]) -> str | None:
        return next((t for t in distinct(targets) if t in tripped), None)

    def hold_tripped(self, row: Notification, targets: Targets, tripped: dict[str, datetime], now: datetime) -> Outcome:
        """`row`, waiting for a worker, held as behind an open circuit for its tripped target."""
        key = self.tripped_target(targets, tripped)
        if key is None:
            raise ValueError(f"notification {row.pk} has no tripped target")
        recipients.give_back([row], now)
        return outcomes.defer(row, tripped[key], now, f"circuit open for {key}", held_for=key)

    def observe(self, outcomes: Iterable[Outcome], now: datetime, targets: RowTargets) -> set[str]:
        """The breakers' view of a write-back; the targets whose held rows are due again."""
        return self.breaker.observe(outcomes, now, targets)
