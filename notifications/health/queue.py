"""Queue health: the facts the admin header, `notifications_status` and the system check share.

Two queries whatever the size of the queue: one aggregate over the notifications
(rows per state, the oldest due row, rows in flight and, while a setting of the site
holds a channel's rows, such as a webhook secret it cannot sign with, the rows that
wait for it: `Channel.setting_holds`) and one for the latest tick records (the last
tick, and each recent host's clock offset as its last tick measured it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.db.models import Aggregate, Count, Min, QuerySet
from django.utils import timezone

from notifications.channels import SettingHold, registry
from notifications.conf import Defaults, app_settings, positive_int
from notifications.health.flow import FlowHealth, flow_health
from notifications.models import Notification, TickRun, states
from notifications.outcomes import TICK_COUNTS

# Cron runs a tick every minute; three minutes without one finishing means it stopped.
STALE_AFTER = timedelta(minutes=3)


# Tick records read for the clock report, newest first by insertion (the one order no
# host's clock can skew): each host's latest among them gives its offset.
RECENT_TICKS = 50


@dataclass(frozen=True)
class QueueHealth:
    """A snapshot of the queue and of the ticks that drain it."""

    now: datetime
    counts: dict[str, int]  # rows per State value
    in_flight: int  # rows a tick holds a live claim on
    oldest_due_at: datetime | None  # earliest next_fire_at a tick would claim now
    last_tick: TickRun | None
    # rows a tick would send now: the `due` state and the retries whose time has come (and a
    # recurring partial failure or dead letter at its next occurrence)
    due_now: int = 0
    stale_after: timedelta = STALE_AFTER
    # host -> seconds its clock was ahead of the database's (negative: behind), as
    # measured by its latest recent tick; hosts whose tick could not measure are left out
    clock_offsets: dict[str, float] = field(default_factory=dict)
    max_clock_offset: float = Defaults.MAX_CLOCK_OFFSET
    # Each setting that keeps a channel from sending some rows (NOTIFICATIONS_WEBHOOK_SECRET
    # empty: the webhook's; a relative MEDIA_ROOT: email with attachments), with how many
    # rows the tick holds for it meanwhile.
    setting_holds: tuple[tuple[SettingHold, int], ...] = ()
    open_digests: int = 0  # digests collecting rows, or due and not yet sent
    # "pid N on host" -> why that `runtick --loop` polls instead of waking on NOTIFY, from its
    # latest recent tick (a loop whose fast lane works, or stopped, is left out)
    fast_lanes_off: dict[str, str] = field(default_factory=dict)

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

    @property
    def configuration_warning(self) -> str | None:
        """What an operator must hear while settings hold rows back; None while none does."""
        said = [hold.warning(waiting) for hold, waiting in self.setting_holds if waiting]
        return " ".join(said) or None

    # The JSON's names for the first setting hold, kept from when the webhook's secret was the only one.
    @property
    def signing_problem(self) -> str | None:
        return self.setting_holds[0][0].problem if self.setting_holds else None

    @property
    def unsigned(self) -> int:
        return self.setting_holds[0][1] if self.setting_holds else 0

    @property
    def last_tick_held(self) -> str | None:
        """What the last tick held for a setting of its own process (its record), or None."""
        tick = self.last_tick
        if tick is None or not tick.held:
            return None
        return f"The last tick (pid {tick.pid} on {tick.host}) held rows for a setting: {tick.held}."

    @property
    def fast_lane_warning(self) -> str | None:
        """What an operator should hear while a `runtick --loop` on PostgreSQL polls because its
        fast lane is silent (rows wait up to its poll interval); None while none does."""
        if not self.fast_lanes_off:
            return None
        said = "; ".join(f"runtick --loop (pid {loop}): {why}" for loop, why in self.fast_lanes_off.items())
        return f"The fast lane is off: {said}."

    @property
    def skewed_hosts(self) -> dict[str, float]:
        """The hosts whose clock is further than `max_clock_offset` from the database's."""
        return {host: offset for host, offset in self.clock_offsets.items() if abs(offset) > self.max_clock_offset}

    @property
    def clock_warning(self) -> str | None:
        """What an operator must hear when a ticking host's clock is off; None while all agree."""
        skewed = self.skewed_hosts
        if not skewed:
            return None
        hosts = ", ".join(f"{host} is {describe_offset(offset)}" for host, offset in skewed.items())
        return (
            f"Clock skew: {hosts} the database's clock (more than {self.max_clock_offset:g}s): leases and due "
            "times are read on each host's own clock, so rows can be sent twice or late. Synchronise the hosts' "
            "clocks with NTP."
        )

    @cached_property
    def flow(self) -> FlowHealth:
        """Open circuits and targets at their limit (two more queries, made when first read)."""
        return flow_health(self.now)

    def last_tick_counts(self) -> dict[str, int]:
        if self.last_tick is None:
            return {}
        counts = {name: getattr(self.last_tick, name) for name in TICK_COUNTS if name != "released"}
        if not counts.get("skipped"):  # shown once recipients' choices skip something
            counts.pop("skipped", None)
        return counts

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts for monitoring."""
        tick = self.last_tick
        return {
            "now": self.now.isoformat(),
            "counts": dict(self.counts),
            "in_flight": self.in_flight,
            "open_digests": self.open_digests,
            "due_now": self.due_now,
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
                "clock_offset": tick.clock_offset,
                "held": tick.held,
                **self.last_tick_counts(),
            },
            "stale": self.stale,
            "stale_after_seconds": self.stale_after.total_seconds(),
            "warning": self.warning,
            "clock_offsets": {host: round(offset, 3) for host, offset in self.clock_offsets.items()},
            "max_clock_offset_seconds": self.max_clock_offset,
            "clock_warning": self.clock_warning,
            "signing_problem": self.signing_problem,
            "unsigned": self.unsigned,
            "setting_holds": [{"problem": hold.problem, "rows": waiting} for hold, waiting in self.setting_holds],
            # configuration_warning is this process's settings' view; last_tick.held the tick's own
            "configuration_warning": self.configuration_warning,
            "last_tick_held": self.last_tick_held,
            "fast_lanes_off": dict(self.fast_lanes_off),
            "fast_lane_warning": self.fast_lane_warning,
            **self.flow.as_dict(),
        }


def queue_health(
    now: datetime | None = None, stale_after: timedelta = STALE_AFTER, max_clock_offset: float | None = None
) -> QueueHealth:
    """Read the queue's health now (two queries).

    `max_clock_offset` (seconds) defaults to `NOTIFICATIONS_MAX_CLOCK_OFFSET`.
    """
    now = now or timezone.now()
    holds = setting_holds()
    extra = {f"held_for_setting_{i}": Count("pk", filter=hold.rows) for i, hold in enumerate(holds)}
    counts, facts = count_states(
        Notification.objects.all(),
        now,
        in_flight=Count("pk", filter=states.claim_live(now)),
        oldest_due_at=Min("next_fire_at", filter=states.ready(now, positive_int("MAX_RETRIES"))),
        due_now=Count("pk", filter=states.ready(now, positive_int("MAX_RETRIES"))),
        open_digests=states.open_digests(now),
        **extra,
    )
    ticks = list(TickRun.objects.order_by("-pk")[:RECENT_TICKS])
    last_tick = max(ticks, key=lambda tick: (tick.finished_at, tick.pk), default=None)
    return QueueHealth(
        now=now,
        counts=counts,
        in_flight=facts["in_flight"],
        oldest_due_at=facts["oldest_due_at"],
        due_now=facts["due_now"],
        last_tick=last_tick,
        stale_after=stale_after,
        clock_offsets=latest_clock_offsets(ticks),
        max_clock_offset=clock_threshold() if max_clock_offset is None else max_clock_offset,
        setting_holds=tuple((hold, facts[f"held_for_setting_{i}"]) for i, hold in enumerate(holds)),
        open_digests=facts["open_digests"],
        fast_lanes_off=fast_lanes_off(ticks, now - stale_after),
    )


def count_states(
    rows: QuerySet[Notification], now: datetime, **aggregates: Aggregate
) -> tuple[dict[str, int], dict[str, Any]]:
    """The rows of `rows` in each state at `now` (by State value, every state, in triage
    order), and the `aggregates` by name: one query whatever the number of rows."""
    facts = rows.aggregate(
        **{f"state_{state.value}": Count("pk", filter=cond.q(now)) for state, cond in states.STATES.items()},
        **aggregates,
    )
    return {state.value: facts.pop(f"state_{state.value}") for state in states.STATES}, facts


def setting_holds() -> list[SettingHold]:
    """What a setting of the site keeps each registered channel from sending (`Channel.setting_holds`)."""
    holds = []
    for name in registry.names():
        channel = registry.channel(name)
        if channel is not None:
            holds.extend(channel.setting_holds())
    return holds


def latest_clock_offsets(ticks: Iterable[TickRun]) -> dict[str, float]:
    """Each host's clock offset from its latest tick among `ticks` (given newest first).

    A host whose latest tick could not measure is left out rather than judged by an
    older reading.
    """
    offsets: dict[str, float] = {}
    seen: set[str] = set()
    for tick in ticks:
        if tick.host in seen:
            continue
        seen.add(tick.host)
        if tick.clock_offset is not None:
            offsets[tick.host] = tick.clock_offset
    return offsets


def fast_lanes_off(ticks: Iterable[TickRun], since: datetime) -> dict[str, str]:
    """Each loop's (process's) reason to poll, from its latest tick among `ticks` (given
    newest first) that finished after `since`; loops whose latest tick had none are left out."""
    off: dict[str, str] = {}
    seen: set[tuple[str, int]] = set()
    for tick in ticks:
        if (tick.host, tick.pid) in seen or tick.finished_at < since:
            continue
        seen.add((tick.host, tick.pid))
        if tick.fast_lane_off:
            off[f"{tick.pid} on {tick.host}"] = tick.fast_lane_off
    return off


def recorded_clock_offsets(using: str | None = None) -> dict[str, float]:
    """Each recently ticking host's clock offset, as its latest tick measured it (one query)."""
    return latest_clock_offsets(TickRun.objects.using(using).order_by("-pk")[:RECENT_TICKS])


def clock_threshold() -> float:
    """`NOTIFICATIONS_MAX_CLOCK_OFFSET`, or its default while the setting is invalid (E015 says so)."""
    value = app_settings.MAX_CLOCK_OFFSET
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return float(Defaults.MAX_CLOCK_OFFSET)
    return float(value)


def describe_offset(offset: float) -> str:
    """`200.3s ahead of`, `12.0s behind`, `86400.0s (1d) ahead of`: the direction in words."""
    amount = f"{abs(offset):.1f}s"
    if abs(offset) >= 60:
        amount += f" ({humanize(timedelta(seconds=round(abs(offset))))})"
    return f"{amount} ahead of" if offset >= 0 else f"{amount} behind"


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
