"""What the metrics say, read from the database: one snapshot for Prometheus and OpenTelemetry.

`read()` costs six queries whatever the size of the queue and of its history: the
totals (`notifications.store.tallies`: the busiest targets, their totals, the rest's
sums), the rows per state with the oldest due row (the health aggregate), the last tick,
and the open circuits. It needs no metrics library.

Per target, the busiest MAX_TARGET_SERIES targets (by deliveries since the totals began,
then by name) keep their own series; every other target's deliveries are summed under the
target `other`, so whoever chooses webhook URLs does not choose how many series a scrape
returns. A target that enters or leaves the busiest moves its count between its own series
and `other`; the per-channel totals (`notifications_deliveries_total`) never move.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max, Min, Q, Sum
from django.utils import timezone

from notifications.channels import registry
from notifications.conf import positive_int
from notifications.health.queue import count_states
from notifications.models import Notification, Tally, Target, TickRun, states
from notifications.store import tallies

# Targets with a series of their own in the per-target metrics; the rest are summed as `other`.
MAX_TARGET_SERIES = 100


@dataclass(frozen=True)
class Snapshot:
    """The queue's metrics at `now`."""

    now: datetime
    # (channel, target, outcome) -> deliveries since the totals began
    deliveries: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # (upper bound, ticks at or under it), cumulative, `+Inf` last; and their sum
    tick_buckets: list[tuple[float, int]] = field(default_factory=list)
    tick_seconds: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)  # state value -> rows
    in_flight: int = 0
    oldest_due_seconds: float = 0.0  # 0 when nothing is due
    open_circuits: int = 0  # targets whose rows are held: open or half-open
    open_digests: int = 0  # digests collecting rows, or due and not yet sent
    last_tick_at: datetime | None = None
    # (category, reason: skipped | throttled) -> firings skipped whole (recipients' choices)
    skipped: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def tick_count(self) -> int:
        return self.tick_buckets[-1][1] if self.tick_buckets else 0

    def by_channel(self) -> dict[tuple[str, str], int]:
        """(channel, outcome) -> deliveries, every outcome of every channel seen (0 included)."""
        totals: Counter[tuple[str, str]] = Counter()
        channels = {channel for channel, _, _ in self.deliveries} or set(registry.names())
        for channel in channels:
            for outcome in tallies.DELIVERY_OUTCOMES:
                totals[(channel, outcome)] += 0
        for (channel, _target, outcome), count in self.deliveries.items():
            totals[(channel, outcome)] += count
        return dict(sorted(totals.items()))


def busiest_targets(limit: int = MAX_TARGET_SERIES) -> list[str]:
    """The `limit` targets with the most deliveries (then by name), `other` aside."""
    ranked = (
        Tally.objects.filter(kind=Tally.Kind.DELIVERY)
        .exclude(target=tallies.OTHER)
        .values("target")
        .annotate(deliveries=Sum("count"))
        .order_by("-deliveries", "target")
        .values_list("target", flat=True)
    )
    return list(ranked[:limit])


def read(now: datetime | None = None, *, max_targets: int = MAX_TARGET_SERIES) -> Snapshot:
    """The metrics now (six queries), at most `max_targets` targets and `other` per channel."""
    now = now or timezone.now()
    deliveries: dict[tuple[str, str, str], int] = {}
    buckets: dict[float, int] = {}
    tick_seconds = 0.0
    skipped: dict[tuple[str, str], int] = {}
    own = [*busiest_targets(max_targets), tallies.OTHER]
    delivery = Q(kind=Tally.Kind.DELIVERY)
    for kind, channel, target, outcome, count, total in Tally.objects.filter(
        Q(kind__in=[Tally.Kind.TICK, Tally.Kind.SKIPPED]) | (delivery & Q(target__in=own))
    ).values_list("kind", "channel", "target", "outcome", "count", "total"):
        if kind == Tally.Kind.DELIVERY:
            deliveries[(channel, target, outcome)] = int(count)
        elif kind == Tally.Kind.TICK:
            bound = math.inf if outcome == "+Inf" else float(outcome)
            buckets[bound] = buckets.get(bound, 0) + int(count)
            tick_seconds += float(total)
        elif kind == Tally.Kind.SKIPPED:
            skipped[(target, outcome)] = int(count)
    rest = (
        Tally.objects.filter(delivery)
        .exclude(target__in=own)
        .values("channel", "outcome")
        .annotate(deliveries=Sum("count"))
        .order_by()
        .values_list("channel", "outcome", "deliveries")
    )
    for channel, outcome, count in rest:
        key = (channel, tallies.OTHER, outcome)
        deliveries[key] = deliveries.get(key, 0) + int(count or 0)
    rows, facts = count_states(
        Notification.objects.all(),
        now,
        in_flight=Count("pk", filter=states.claim_live(now)),
        oldest_due_at=Min("next_fire_at", filter=states.ready(now, positive_int("MAX_RETRIES"))),
        open_digests=states.open_digests(now),
    )
    oldest = facts["oldest_due_at"]
    last_tick_at = TickRun.objects.aggregate(last=Max("finished_at"))["last"]
    open_circuits = Target.objects.exclude(state=Target.State.CLOSED).count()
    return Snapshot(
        now=now,
        deliveries=deliveries,
        tick_buckets=cumulative(buckets),
        tick_seconds=tick_seconds,
        rows=rows,
        in_flight=facts["in_flight"],
        oldest_due_seconds=max((now - oldest).total_seconds(), 0.0) if oldest else 0.0,
        open_circuits=open_circuits,
        open_digests=facts["open_digests"],
        last_tick_at=last_tick_at,
        skipped=skipped,
    )


def cumulative(buckets: dict[float, int]) -> list[tuple[float, int]]:
    """Counts per bucket as a histogram's cumulative buckets, over every bound of
    `tallies.TICK_BUCKETS` (and any other bound found), `+Inf` last."""
    bounds = sorted({*tallies.TICK_BUCKETS, *buckets})
    running = 0
    out = []
    for bound in bounds:
        running += buckets.get(bound, 0)
        out.append((bound, running))
    return out
