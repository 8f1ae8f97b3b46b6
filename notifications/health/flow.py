"""What flow control holds back now, for operators: open circuits and targets at their limit.

The admin header, `notifications_status` and its `--json` read it through
`QueueHealth.flow` (two queries, made only when asked): the targets whose circuit is not
closed, with the rows each holds, and the rate buckets that are empty now (a row to that
target would be deferred to a later slot). Neither is a fault of the queue: nothing is lost
and no retry is spent, so neither changes the exit status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, F, OuterRef, Subquery, Window
from django.db.models.functions import Coalesce
from django.utils import timezone

from notifications.flow.ratelimit import limits_for, parse, read_limits
from notifications.models import Notification, RateBucket, Target

# Open circuits and targets at their limit shown at most (the worst first: the most rows
# waiting, then the longest failure streak); the header and the status say how many in all.
SHOWN = 10


@dataclass(frozen=True)
class OpenCircuit:
    """A target whose rows are held: open (waiting for its probe), half-open (probing), or
    held open by hand (no probe until an operator closes it)."""

    key: str
    state: str
    failures: int
    retry_at: datetime | None
    manual: bool
    waiting: int  # rows held for it
    last_error: str

    def describe(self) -> str:
        if self.manual:
            when = "held open by hand"
        elif self.state == Target.State.HALF_OPEN:
            when = "probe in flight"
        else:
            when = f"probe at {self.retry_at:%Y-%m-%d %H:%M:%S%z}" if self.retry_at else "probe due"
        rows = "1 row waits" if self.waiting == 1 else f"{self.waiting} rows wait"
        return f"{self.key} {self.state} after {self.failures} failures, {when}; {rows}"


@dataclass(frozen=True)
class AtLimit:
    """A target with a rate bucket empty now: its next row waits `wait` seconds for a slot."""

    target: str
    limit: str
    wait: float


@dataclass(frozen=True)
class FlowHealth:
    """The worst few (SHOWN) open circuits and targets at their limit, and how many in all."""

    open_circuits: list[OpenCircuit] = field(default_factory=list)
    at_limit: list[AtLimit] = field(default_factory=list)
    open_count: int = 0
    at_limit_count: int = 0

    @property
    def more_open(self) -> int:
        return max(self.open_count - len(self.open_circuits), 0)

    @property
    def more_at_limit(self) -> int:
        return max(self.at_limit_count - len(self.at_limit), 0)

    def lines(self) -> list[str]:
        """Short lines of text for `notifications_status`; none when nothing is held back."""
        lines = [f"circuit open: {circuit.describe()}" for circuit in self.open_circuits]
        if self.more_open:
            more = f"{self.more_open:,} more ({self.open_count:,} in all; the Targets list has them)"
            lines.append(f"circuit open: {more}")
        lines += [f"at limit: {a.target} ({a.limit}), next slot in {a.wait:.2f}s" for a in self.at_limit]
        if self.more_at_limit:
            lines.append(f"at limit: {self.more_at_limit:,} more ({self.at_limit_count:,} in all)")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "open_circuits_total": self.open_count,
            "at_limit_total": self.at_limit_count,
            "open_circuits": [
                {
                    "target": c.key,
                    "state": c.state,
                    "failures": c.failures,
                    "retry_at": c.retry_at.isoformat() if c.retry_at else None,
                    "manual": c.manual,
                    "waiting": c.waiting,
                    "last_error": c.last_error,
                }
                for c in self.open_circuits
            ],
            "at_limit": [
                {"target": a.target, "limit": a.limit, "wait_seconds": round(a.wait, 3)} for a in self.at_limit
            ],
        }


def flow_health(now: datetime | None = None) -> FlowHealth:
    """Open circuits (one query, rows waiting counted over the held-rows index) and targets
    at their limit (one query over the buckets with less than a token left when last taken)."""
    now = now or timezone.now()
    circuits, open_count = open_circuits()
    limited = at_limit(now)
    return FlowHealth(circuits, limited[:SHOWN], open_count, len(limited))


def open_circuits(shown: int = SHOWN) -> tuple[list[OpenCircuit], int]:
    """The worst `shown` targets whose circuit is not closed, and how many there are (one query)."""
    held = Notification.objects.filter(held_for=OuterRef("key")).order_by().values("held_for")
    waiting = Subquery(held.annotate(n=Count("pk")).values("n"))
    targets = (
        Target.objects.exclude(state=Target.State.CLOSED)
        .annotate(waiting=Coalesce(waiting, 0), total=Window(Count("pk")))
        .order_by(F("waiting").desc(), F("failures").desc(), "key")[:shown]
    )
    fields = ("key", "state", "failures", "retry_at", "manual", "waiting", "last_error", "total")
    found = [
        (OpenCircuit(key, state, failures, retry_at, manual, int(held), last_error), int(total))
        for key, state, failures, retry_at, manual, held, last_error, total in targets.values_list(*fields)
    ]
    return [circuit for circuit, _ in found], (found[0][1] if found else 0)


def at_limit(now: datetime) -> list[AtLimit]:
    """Buckets of limits in force now (NOTIFICATIONS_RATE_LIMITS, read as the tick reads it)
    that hold less than one token at `now`. A bucket only fills with time, so the ones that
    had a token left when last taken are not read; one whose limit is no longer configured
    holds nothing back and is not shown."""
    limits = read_limits()
    stamp = now.timestamp()
    found = []
    for bucket in RateBucket.objects.filter(tokens__lt=1).order_by("key"):
        target, _, spec = bucket.key.rpartition(" ")
        try:
            (limit,) = parse(spec)
        except ValueError:
            continue  # not a bucket this version wrote
        if limit not in limits_for(limits, target):
            continue  # a limit since removed or changed: the tick no longer takes from it
        tokens = min(float(limit.count), bucket.tokens + max(stamp - bucket.stamp, 0.0) * limit.rate)
        if tokens < 1:
            found.append(AtLimit(target, str(limit), (1 - tokens) / limit.rate))
    return sorted(found, key=lambda a: (-a.wait, a.target))
