"""Queue health: the facts the admin header, `notifications_status` and the system check share.

Two queries whatever the size of the queue: one aggregate over the notifications
(rows per state, the oldest due row, rows in flight) and one for the latest tick record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.utils import timezone

from .conf import app_settings
from .models import PARTIAL_PREFIX, Notification, State, TickRun

# Cron runs a tick every minute; three minutes without one finishing means it stopped.
STALE_AFTER = timedelta(minutes=3)

TICK_COUNTS = ("claimed", "succeeded", "partial", "retried", "dead_lettered")


def state_conditions(now: datetime) -> dict[State, Q]:
    """Each state as a condition on one row, matching `NotificationQuerySet.in_state`."""
    partial = Q(last_error__startswith=PARTIAL_PREFIX)
    alive = Q(dead_lettered_at__isnull=True)
    healthy = alive & Q(error_count=0) & ~partial
    return {
        State.DUE: healthy & Q(next_fire_at__lte=now),
        State.SCHEDULED: healthy & Q(next_fire_at__gt=now),
        State.RETRYING: alive & Q(error_count__gt=0) & ~partial,
        State.PARTIAL: alive & partial,
        State.DEAD: Q(dead_lettered_at__isnull=False),
        State.PARKED: healthy & Q(next_fire_at__isnull=True),
    }


@dataclass(frozen=True)
class QueueHealth:
    """A snapshot of the queue and of the ticks that drain it."""

    now: datetime
    counts: dict[str, int]  # rows per State value
    in_flight: int  # rows a tick holds a live claim on
    oldest_due_at: datetime | None  # earliest next_fire_at a tick would claim now
    last_tick: TickRun | None
    stale_after: timedelta = STALE_AFTER

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def oldest_due_age(self) -> timedelta | None:
        """How long the oldest due row has waited (zero or more), or None when nothing is due."""
        if self.oldest_due_at is None:
            return None
        return max(self.now - self.oldest_due_at, timedelta(0))

    @property
    def last_tick_age(self) -> timedelta | None:
        if self.last_tick is None:
            return None
        return max(self.now - self.last_tick.finished_at, timedelta(0))

    @property
    def stale(self) -> bool:
        """True when no tick has finished within `stale_after` (or none ever has)."""
        age = self.last_tick_age
        return age is None or age > self.stale_after

    @property
    def warning(self) -> str | None:
        """What an operator must hear when ticks have stopped; None while they run."""
        if not self.stale:
            return None
        if self.last_tick is None:
            return "No tick has ever finished: the cron line (manage.py runtick) is not running."
        return (
            f"No tick has finished in the last {humanize(self.stale_after)} "
            f"(the last one {humanize(self.last_tick_age)} ago): the cron line (manage.py runtick) is not running."
        )

    def last_tick_counts(self) -> dict[str, int]:
        if self.last_tick is None:
            return {}
        return {name: getattr(self.last_tick, name) for name in TICK_COUNTS}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts for monitoring."""
        tick = self.last_tick
        return {
            "now": self.now.isoformat(),
            "counts": dict(self.counts),
            "in_flight": self.in_flight,
            "oldest_due_at": self.oldest_due_at.isoformat() if self.oldest_due_at else None,
            "oldest_due_age_seconds": _seconds(self.oldest_due_age),
            "last_tick": None
            if tick is None
            else {
                "started_at": tick.started_at.isoformat(),
                "finished_at": tick.finished_at.isoformat(),
                "age_seconds": _seconds(self.last_tick_age),
                "host": tick.host,
                "pid": tick.pid,
                **self.last_tick_counts(),
            },
            "stale": self.stale,
            "stale_after_seconds": self.stale_after.total_seconds(),
            "warning": self.warning,
        }


def queue_health(now: datetime | None = None, stale_after: timedelta = STALE_AFTER) -> QueueHealth:
    """Read the queue's health now (two queries)."""
    now = now or timezone.now()
    conditions = state_conditions(now)
    claimable = Q(next_fire_at__lte=now, error_count__lt=app_settings.MAX_RETRIES)
    facts = Notification.objects.aggregate(
        **{f"state_{state.value}": Count("pk", filter=q) for state, q in conditions.items()},
        in_flight=Count("pk", filter=Q(claimed_until__gt=now)),
        oldest_due_at=Min("next_fire_at", filter=claimable),
    )
    counts = {state.value: facts[f"state_{state.value}"] for state in conditions}
    last_tick = TickRun.objects.order_by("-finished_at", "-pk").first()
    return QueueHealth(
        now=now,
        counts=counts,
        in_flight=facts["in_flight"],
        oldest_due_at=facts["oldest_due_at"],
        last_tick=last_tick,
        stale_after=stale_after,
    )


def humanize(delta: timedelta | None) -> str:
    """A short age: `45s`, `3m 10s`, `2h 5m`, `4d 3h`."""
    if delta is None:
        return "never"
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds}s" if seconds else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else round(delta.total_seconds(), 3)
