"""Where a row stands: each state defined once, for the database and for a row in memory.

A state is a conjunction of a few facts about the row's columns. Each fact is written
twice on one line, as a `Q` (what the QuerySet, the admin filter, `health` and the
commands filter on) and as a predicate on one loaded row (what `Notification.state()`
shows), so a reader can see at a glance that they say the same; `tests/test_states.py`
checks that they agree on every combination of the columns, on each database.

The states partition the table: every row is in exactly one.

A leaf module: Django, the standard library and the models' channel hook only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from notifications.models import channel_hook


class State(models.TextChoices):
    """Where a row stands, as the admin shows and filters it. One spelling each."""

    DUE = "due", _("Due")
    SCHEDULED = "scheduled", _("Scheduled")
    RETRYING = "retrying", _("Retrying")
    PARTIAL = "partial", _("Partial failure")
    DEAD = "dead", _("Dead letter")
    PARKED = "parked", _("Parked")
    PAUSED = "paused", _("Paused")
    EXPIRED = "expired", _("Expired")
    DIGEST = "digest", _("In a digest")
    ESCALATION = "escalation", _("Escalation")


# What `last_error` starts with after a partial failure: operators read it there (the
# failed channels follow, comma-separated); the state itself is `failed_channels`.
PARTIAL_PREFIX = "partial: "


def partial_error(failed: list[str]) -> str:
    """`partial: webhook`: the `last_error` text of a partial failure."""
    return PARTIAL_PREFIX + ",".join(failed)


@dataclass(frozen=True)
class Condition:
    """One condition on a row, said twice: `where` for the database, `holds(row, now)` in memory.

    `where` is a `Q`, or a function of `now` returning one for conditions on time.
    """

    where: Q | Callable[[datetime], Q]
    holds: Callable[[Any, datetime], bool]

    def q(self, now: datetime) -> Q:
        return self.where if isinstance(self.where, Q) else self.where(now)

    def __and__(self, other: Condition) -> Condition:
        return Condition(
            lambda now: self.q(now) & other.q(now),
            lambda row, now: self.holds(row, now) and other.holds(row, now),
        )


# The facts states are made of, in pairs that split the table in two. There is no
# negation, so NULL never needs a second thought: a NULL column passes only `isnull`.
DEAD_LETTERED = Condition(Q(dead_lettered_at__isnull=False), lambda r, now: r.dead_lettered_at is not None)
ALIVE = Condition(Q(dead_lettered_at__isnull=True), lambda r, now: r.dead_lettered_at is None)

PARTLY_FAILED = Condition(Q(failed_channels__isnull=False), lambda r, now: r.failed_channels is not None)
WHOLE = Condition(Q(failed_channels__isnull=True), lambda r, now: r.failed_channels is None)

FAILING = Condition(Q(error_count__gt=0), lambda r, now: r.error_count > 0)
CLEAN = Condition(Q(error_count=0), lambda r, now: r.error_count == 0)

UNSCHEDULED = Condition(Q(next_fire_at__isnull=True), lambda r, now: r.next_fire_at is None)
REACHED = Condition(
    lambda now: Q(next_fire_at__lte=now), lambda r, now: r.next_fire_at is not None and r.next_fire_at <= now
)
AHEAD = Condition(
    lambda now: Q(next_fire_at__gt=now), lambda r, now: r.next_fire_at is not None and r.next_fire_at > now
)

PAUSED = Condition(Q(paused_at__isnull=False), lambda r, now: r.paused_at is not None)
RUNNING = Condition(Q(paused_at__isnull=True), lambda r, now: r.paused_at is None)

EXPIRED = Condition(Q(expired_at__isnull=False), lambda r, now: r.expired_at is not None)
IN_TIME = Condition(Q(expired_at__isnull=True), lambda r, now: r.expired_at is None)

# Whether the row has joined a digest (notifications.store.digests).
IN_DIGEST = Condition(Q(digest_id__isnull=False), lambda r, now: r.digest_id is not None)
UNGROUPED = Condition(Q(digest_id__isnull=True), lambda r, now: r.digest_id is None)

# Whether the row waits as an escalation (`notifications.outcomes.escalation`).
ESCALATING = Condition(Q(escalation_of__isnull=False), lambda r, now: r.escalation_of is not None)
FIRST_FIRING = Condition(Q(escalation_of__isnull=True), lambda r, now: r.escalation_of is None)

ACTIVE = RUNNING & IN_TIME  # neither paused by hand nor holding an expired firing
HEALTHY = ALIVE & WHOLE & CLEAN  # no failure on record: the row just waits for its due time
# Rows of digests still to go out, collecting rows or due and not yet sent: what "open
# digests" counts (`Count("digest_id", distinct=True, filter=OPEN_DIGEST_ROWS.q(now))`).
SCHEDULED_ANY_TIME = Condition(Q(next_fire_at__isnull=False), lambda r, now: r.next_fire_at is not None)
OPEN_DIGEST_ROWS = ACTIVE & HEALTHY & IN_DIGEST & SCHEDULED_ANY_TIME
# Every row kept as a dead letter and not paused: the DEAD state, and EXPIRED one-shot rows
# (a firing too late to send is kept as a dead letter). What a purge of dead letters takes.
DEAD_LETTERS = RUNNING & DEAD_LETTERED

# The states, in the order an operator triages them (the admin filter's order). A paused
# row is paused whatever else it holds; an expired firing shows before a dead letter.
STATES: dict[State, Condition] = {
    State.DUE: ACTIVE & HEALTHY & REACHED,
    State.SCHEDULED: ACTIVE & HEALTHY & AHEAD & UNGROUPED & FIRST_FIRING,
    State.RETRYING: ACTIVE & ALIVE & WHOLE & FAILING,
    State.PARTIAL: ACTIVE & ALIVE & PARTLY_FAILED,
    State.DEAD: ACTIVE & DEAD_LETTERED,
    State.PARKED: ACTIVE & HEALTHY & UNSCHEDULED,
    State.PAUSED: PAUSED,
    State.EXPIRED: RUNNING & EXPIRED,
    # Waiting in a digest for its window to end (or for quiet hours, a rate limit ...).
    State.DIGEST: ACTIVE & HEALTHY & AHEAD & IN_DIGEST & FIRST_FIRING,
    # Waiting for its deadline (`next_fire_at`): unless the inbox message is read by then,
    # the escalation goes out.
    State.ESCALATION: ACTIVE & HEALTHY & AHEAD & ESCALATING,
}


def condition(state: str) -> Condition:
    """The condition of `state` (a `State` or its value); ValueError for anything else."""
    try:
        return STATES[State(state)]
    except ValueError:
        raise ValueError(f"unknown state {state!r}") from None


def state_of(row: Any, now: datetime) -> State:
    """The one state `row` is in at `now`."""
    for state, cond in STATES.items():
        if cond.holds(row, now):
            return state
    raise AssertionError(f"no state holds for {row!r}: the conditions must cover every row")


def sends_on(channel: str) -> Q:
    """Rows whose `channels` hold `channel`: JSON list positions rather than `contains`,
    which SQLite lacks."""
    match = Q()
    for position in range(max_channels()):
        match |= Q(**{f"channels__{position}": channel})
    return match


def max_channels() -> int:
    """The most channels a row can list: each registered channel once (asked through
    `channel_hook`: the models name no registry)."""
    return len(channel_hook.channels().names())


# --- what a tick may take ----------------------------------------------------------------


def ready(now: datetime, max_retries: int) -> Q:
    """Due by `now`, not paused, with retries left (the row's own `max_retries`, else the
    site's): what a tick claims, live claims aside. Not a state: a retrying row is ready
    when its backoff is over, and so is a recurring partial failure or dead letter at its
    next occurrence. A row's `max_retries` below 1 (written around validation) counts as
    the site's, so the tick claims the row and dead-letters it as invalid."""
    retries_left = Q(Q(max_retries__isnull=True) | Q(max_retries__lt=1), error_count__lt=max_retries) | Q(
        max_retries__gte=1, error_count__lt=F("max_retries")
    )
    return Q(retries_left, next_fire_at__lte=now, paused_at__isnull=True)


def claim_live(now: datetime | None = None, lease_clock: Any = None) -> Q:
    """Rows a tick holds a live claim on: being delivered, their outcome not yet written back
    (compared with `lease_clock`, e.g. the database's `Now()`, or else with `now`)."""
    return Q(claimed_until__gt=now if lease_clock is None else lease_clock)


# A firing in flight that an erasure took back (`services.erasure`): the claim's token is
# gone while its lease runs, so the firing's write-back lands nowhere and leaves no delivery
# record, and no tick claims the row again before that lease ends.
TAKEN_BACK = Q(claim_token__isnull=True, claimed_until__isnull=False)


def claimable(now: datetime, max_retries: int, lease_clock: Any = None) -> Q:
    """Rows a tick may claim at `now`: ready, and no live claim. Served by the due index.

    `lease_clock` is what claims are compared with (the tick passes the database's clock,
    `Now()`, which every host shares); None compares them with `now`."""
    expired = Q(claimed_until__lte=now if lease_clock is None else lease_clock)
    return Q(Q(claimed_until__isnull=True) | expired, ready(now, max_retries))


def open_digests(now: datetime) -> Any:
    """An aggregate: how many digests are open at `now` (see OPEN_DIGEST_ROWS)."""
    return models.Count("digest_id", distinct=True, filter=OPEN_DIGEST_ROWS.q(now))
