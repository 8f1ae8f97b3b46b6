"""Digests: one-shot rows of one `recipient` and `digest_key`, sent together as one firing.

How a digest is kept. A row with a `digest_key` waits like any row until a tick finds it
due; the tick then *files* it (`file_due`) instead of sending it: the first row of its
group to come due opens a digest (a fresh `digest_id`) whose window ends `digest_window`
seconds after that row's due time, and rows of the group due before the window ends join
it. Every row of a digest carries the digest's state, written for all of them at once:
its `next_fire_at` (the window's end, later a retry's time), its `firing_id` (one
`webhook-id` for every attempt), and after each firing the same outcome; each keeps its
own due time in `firing_due_at`. No row leads the others, so cancelling any row of an
open digest (the first one too) only takes that row out.

The ordinary claim leaves rows that joined a digest alone (`claims.selection`):
`claim_digests` claims whole digests whose window has ended, with the batch's claim
token, and hands the tick one row per digest (the oldest, by id) holding the digest's rows
in `digest_rows`. The tick sends it as one firing; `spread` copies its outcome onto the
other rows before the write-back, so the digest settles as one.

One lock per group. Filing a row and claiming a digest each run in a short transaction
holding the lock of the row's group (`group_locks`: an advisory lock on PostgreSQL and
MariaDB/MySQL, SQLite's write lock), so two ticks never claim one digest, and a row never
joins a digest that a tick is sending (it opens the next one). A digest whose rows a live
claim holds is being sent: it takes no new row, and no other tick claims it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import OperationalError, connection, transaction
from django.db.models import BooleanField, Case, F, Min, Q, Value, When
from django.db.models.functions import Coalesce

from notifications.conf import MAX_DELAY_SECONDS, digest_max_items, positive_int
from notifications.databases import DatabaseNow
from notifications.models import Notification, states
from notifications.outcomes import Outcome
from notifications.store.claims import Claim, check, lease_end, load_defensively

logger = logging.getLogger("notifications.tick")


def waits_for_digest(row: Notification) -> bool:
    """Whether a claimed row is to join a digest rather than go out by itself: a one-shot
    row with a digest key and window that has joined none yet (validated by the tick)."""
    return bool(row.digest_key) and row.digest_window is not None and row.digest_id is None and not row.is_recurring


# --- filing: a due row joins its group's open digest, or opens one ---------------------------


@dataclass
class Filing:
    """What `file_due` did with a tick's ready rows."""

    rows: list[Notification]  # rows to send as they are
    filed: int = 0  # rows that joined a digest: their claim is released, they get no outcome
    closed: bool = False  # some digest is due now (its window has ended, or it is full)


@dataclass
class _Digest:
    """One digest of a group, as filing sees it under the group's lock."""

    id: uuid.UUID
    closes_at: datetime
    firing_id: uuid.UUID
    size: int = 0
    open: bool = True
    new: bool = False
    moved: bool = False  # its window was cut short (full): its earlier rows move too
    joining: list[Notification] = field(default_factory=list)


def file_due(rows: Sequence[Notification], now: datetime, token: uuid.UUID) -> Filing:
    """File the rows that wait for a digest (`waits_for_digest`); return the others.

    One short transaction holding the locks of the rows' groups (recipient, digest_key).
    Rows are filed oldest due first; a filed row's claim is released in the same
    transaction.
    """
    plain: list[Notification] = []
    groups: dict[tuple[str, str], list[Notification]] = defaultdict(list)
    for row in rows:
        if waits_for_digest(row):
            groups[(row.recipient, row.digest_key)].append(row)
        else:
            plain.append(row)
    filing = Filing(plain)
    if not groups:
        return filing
    limit = digest_max_items()
    with group_locks(groups):
        for (recipient, key), members in groups.items():
            filed, closed = _file_group(recipient, key, members, now, token, limit)
            filing.filed += filed
            filing.closed = filing.closed or closed
    return filing


def _own_due(row: Notification) -> datetime:
    due = row.firing_due_at or row.next_fire_at
    assert due is not None  # a claimed row is due
    return due


def _file_group(
    recipient: str, key: str, rows: list[Notification], now: datetime, token: uuid.UUID, limit: int
) -> tuple[int, bool]:
    """File `rows` (claimed by `token`) into their group's digests, under the group's lock
    (`file_due` holds it); (rows filed, whether a digest is due now)."""
    filed = 0
    digests = _digests_of_group(recipient, key)
    for row in sorted(rows, key=lambda r: (_own_due(r), r.pk)):
        due = _own_due(row)
        assert row.digest_window is not None
        # The earliest open window this row is due inside of; else it opens its own.
        inside = [d for d in digests.values() if d.open and d.size < limit and due < d.closes_at]
        digest = min(inside, key=lambda d: d.closes_at, default=None)
        if digest is None:
            window = timedelta(seconds=row.digest_window)
            digest = _Digest(uuid.uuid4(), due + window, row.firing_id, new=True)
            digests[digest.id] = digest
        digest.joining.append(row)
        digest.size += 1
        if digest.size >= limit and digest.closes_at > due:
            digest.closes_at = due  # full: it goes out now, with the row that filled it
            digest.moved = not digest.new
    for digest in digests.values():
        if digest.moved:
            Notification.objects.filter(digest_id=digest.id).update(next_fire_at=digest.closes_at, updated_at=now)
        if digest.joining:
            filed += _join(digest, now, token)
    closed = any(d.joining and d.closes_at <= now for d in digests.values())
    return filed, closed


# --- one lock per group ----------------------------------------------------------------------

# Seconds a tick waits for a group's lock on MariaDB/MySQL (GET_LOCK) before giving up with
# an error: each holder keeps it for a few short statements.
GROUP_LOCK_TIMEOUT = 30


def lock_name(recipient: str, key: str) -> str:
    """The name of a group's advisory lock (64 characters at most, as MariaDB takes)."""
    return "nq-digest-" + hashlib.sha256(f"{recipient}\x00{key}".encode()).hexdigest()[:40]


@contextlib.contextmanager
def group_locks(groups: Iterable[tuple[str, str]]) -> Iterator[None]:
    """A transaction holding the locks of `groups` (recipient, digest_key), so filing a
    row and claiming a digest of one group take turns, on every host.

    Advisory locks, not the rows' own locks, so they never meet the row locks a tick's
    claim or write-back takes (which, taken in another order, could deadlock): PostgreSQL's
    `pg_advisory_xact_lock` (released at the end of the transaction), MariaDB/MySQL's named
    `GET_LOCK` (released after the commit, so the next holder reads what this one wrote).
    Taken in the order of their names, so two ticks locking several never deadlock.
    SQLite's write lock, which the (IMMEDIATE) transaction takes, already serialises it all.
    """
    names = sorted({lock_name(recipient, key) for recipient, key in groups})
    vendor = connection.vendor
    if vendor == "mysql":
        taken: list[str] = []
        try:
            with connection.cursor() as cursor:
                for name in names:
                    cursor.execute("SELECT GET_LOCK(%s, %s)", [name, GROUP_LOCK_TIMEOUT])
                    (granted,) = cursor.fetchone()
                    if granted != 1:
                        raise OperationalError(f"a digest group's lock was not granted within {GROUP_LOCK_TIMEOUT}s")
                    taken.append(name)
            with transaction.atomic():
                yield
        finally:
            if taken:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT " + ", ".join(["RELEASE_LOCK(%s)"] * len(taken)), taken)
        return
    with transaction.atomic():
        if vendor == "postgresql":
            with connection.cursor() as cursor:
                for name in names:
                    number = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [number])
        yield


class _Member(NamedTuple):
    """What filing reads of one row of a group."""

    next_fire_at: datetime | None
    firing_id: uuid.UUID
    live: bool  # a tick holds a live claim on it
    error_count: int
    dead_lettered_at: datetime | None
    failed_channels: Any
    expired_at: datetime | None
    paused_at: datetime | None

    @property
    def healthy(self) -> bool:
        """No firing of its digest has been attempted or is under way."""
        return (
            not self.live
            and not self.error_count
            and self.dead_lettered_at is None
            and (self.failed_channels is None and self.expired_at is None)
        )


def _digests_of_group(recipient: str, key: str) -> dict[uuid.UUID, _Digest]:
    """Read the group's digests (under its lock): each open one (every row healthy, none
    claimed by a tick) and its window's end."""
    live = Case(
        When(claimed_until__gt=DatabaseNow(), then=Value(True)), default=Value(False), output_field=BooleanField()
    )
    query = (
        Notification.objects.filter(recipient=recipient, digest_key=key)
        .annotate(live=live)
        .order_by("pk")
        .values_list(
            "digest_id",
            "next_fire_at",
            "firing_id",
            "live",
            "error_count",
            "dead_lettered_at",
            "failed_channels",
            "expired_at",
            "paused_at",
        )
    )
    seen: dict[uuid.UUID, list[_Member]] = defaultdict(list)
    for digest_id, *facts in query:
        if digest_id is not None:
            seen[digest_id].append(_Member(*facts))
    digests: dict[uuid.UUID, _Digest] = {}
    for digest_id, members in seen.items():
        waiting = [m for m in members if m.paused_at is None]  # a paused row is out until resumed
        if not waiting:
            continue
        ends = [m.next_fire_at for m in waiting if m.next_fire_at is not None]
        healthy = len(ends) == len(waiting) and all(m.healthy for m in waiting)
        closes_at = min(ends) if ends else datetime.max.replace(tzinfo=UTC)
        digests[digest_id] = _Digest(digest_id, closes_at, waiting[0].firing_id, size=len(waiting), open=healthy)
    return digests


def _join(digest: _Digest, now: datetime, token: uuid.UUID) -> int:
    """Make `digest.joining` (claimed by `token`) rows of `digest`: one UPDATE. Each keeps
    its due time in `firing_due_at` (assigned first: MariaDB/MySQL read later assignments
    with earlier ones applied) and waits for the window's end, claim released."""
    pks = [row.pk for row in digest.joining]
    return Notification.objects.filter(pk__in=pks, claim_token=token).update(
        firing_due_at=Coalesce(F("firing_due_at"), F("next_fire_at")),
        next_fire_at=digest.closes_at,
        digest_id=digest.id,
        firing_id=digest.firing_id,
        claim_token=None,
        claimed_until=None,
        updated_at=now,
    )


def _claimed_now() -> Case:
    """Whether a tick holds a live claim on the row, on the database's clock (as the claim compares)."""
    live = When(claimed_until__gt=DatabaseNow(), then=Value(True))
    return Case(live, default=Value(False), output_field=BooleanField())


# --- claiming whole digests --------------------------------------------------------------------


def claim_into(claimed: Claim, now: datetime, limit: int, lease: float) -> bool:
    """Claim up to `limit` digests whose window has ended, with `claimed`'s token, and add
    one row per digest (its oldest, holding the digest's rows in `digest_rows`) to
    `claimed.rows`. True if more may be due: `limit` were found (others may have taken some)."""
    if limit <= 0:
        return True
    due = Notification.objects.due(now, lease_clock=DatabaseNow()).filter(digest_id__isnull=False)
    candidates = list(
        due.values("digest_id", "recipient", "digest_key")
        .annotate(first=Min("next_fire_at"))
        .order_by("first", "digest_id")[:limit]
    )
    more = len(candidates) == limit
    if not candidates:
        return more
    with group_locks((c["recipient"], c["digest_key"]) for c in candidates):
        won = [c["digest_id"] for c in candidates if _claim_digest(c, now, claimed.token, lease)]
    if not won:
        return more
    rows, unloadable = load_defensively(
        Notification.objects.filter(claim_token=claimed.token, digest_id__in=won).order_by("pk")
    )
    claimed.unloadable.update(unloadable)
    # Rows of this claim that joined a digest as it was claimed go out with it.
    taken = {row.pk for row in rows} | set(unloadable)
    claimed.rows[:] = [row for row in claimed.rows if row.pk not in taken]
    claimed.refused[:] = [refused for refused in claimed.refused if refused.row.pk not in taken]
    by_digest: dict[Any, list[Notification]] = defaultdict(list)
    for row in rows:
        by_digest[row.digest_id].append(row)
    firsts = []
    for members in by_digest.values():
        first = members[0]
        first.digest_rows = tuple(members)
        firsts.append(first)
    fit, refused = check(firsts)
    claimed.rows += fit
    claimed.refused += refused
    return more


def _claim_digest(candidate: dict[str, Any], now: datetime, token: uuid.UUID, lease: float) -> bool:
    """Claim every row of one digest, or none: under the group's lock (`claim_into` holds
    it), a digest a live claim holds is another tick's. Rows of the group due before its
    window ended that no tick has filed yet (a tick late, or behind a backlog) join it
    first."""
    digest_id = candidate["digest_id"]
    recipient, key = candidate["recipient"], candidate["digest_key"]
    rows = Notification.objects.filter(digest_id=digest_id, paused_at__isnull=True)
    facts = list(rows.annotate(live=_claimed_now()).values_list("live", "next_fire_at", "firing_id"))
    if any(live for live, _, _ in facts):
        return False  # being sent by another tick
    ends = [(due, firing_id) for _, due, firing_id in facts if due is not None]
    if ends:
        closes_at, firing_id = min(ends)
        room = digest_max_items() - len(facts)
        if room > 0:
            _join_stragglers(recipient, key, _Digest(digest_id, closes_at, firing_id), now, room, token)
    # The digest goes whole: a row of it due later (one an operator ran now) goes too.
    whole = Notification.objects.filter(_claimable_or_ours(now + WHOLE_DIGEST_HORIZON, token), digest_id=digest_id)
    claimable = whole
    return claimable.update(claim_token=token, claimed_until=lease_end(lease)) > 0


# How far ahead the rows of a digest that is going out may be due and still go with it:
# every row the digest holds (a hundred years: conf.MAX_DELAY_SECONDS).
WHOLE_DIGEST_HORIZON = timedelta(seconds=MAX_DELAY_SECONDS)


def _claimable_or_ours(now: datetime, token: uuid.UUID) -> Q:
    """Rows a tick may claim at `now` (their claims compared with the database's clock), or
    that this tick (`token`) has claimed."""
    return states.claimable(now, positive_int("MAX_RETRIES"), DatabaseNow()) | Q(claim_token=token)


def _join_stragglers(recipient: str, key: str, digest: _Digest, now: datetime, room: int, token: uuid.UUID) -> int:
    """Up to `room` due rows of the group that no tick has filed, due before `digest`
    closed, join it (oldest due first): unclaimed, or claimed by this tick (`token`) and
    not filed yet. Two statements; one when there are none."""
    due = Notification.objects.filter(_claimable_or_ours(now, token))
    unfiled = due.filter(
        recipient=recipient, digest_key=key, digest_id__isnull=True, digest_window__isnull=False, recurrence_rule=""
    )
    ids = list(
        unfiled.filter(next_fire_at__lt=digest.closes_at)
        .order_by("next_fire_at", "pk")
        .values_list("pk", flat=True)[:room]
    )
    if not ids:
        return 0
    # Asked again in the UPDATE: a row another tick claims meanwhile is its to file.
    return unfiled.filter(pk__in=ids).update(
        firing_due_at=Coalesce(F("firing_due_at"), F("next_fire_at")),  # first: see `_join`
        next_fire_at=digest.closes_at,
        digest_id=digest.id,
        firing_id=digest.firing_id,
        updated_at=now,
    )


# --- settling as one -----------------------------------------------------------------------------


def spread(outcomes: Iterable[Outcome], shared: Iterable[str]) -> list[Outcome]:
    """`outcomes`, and for a digest's firing the same outcome for each of its other rows
    (its `shared` fields copied from the row that was sent): the write-back then settles
    the digest as one. The delivery log and the signals keep to the row that was sent."""
    shared = tuple(shared)
    spread_out: list[Outcome] = []
    for outcome in outcomes:
        spread_out.append(outcome)
        sent = outcome.row
        for member in sent.digest_rows[1:]:
            for name in shared:
                setattr(member, name, getattr(sent, name))
            spread_out.append(Outcome(member, outcome.kind, delete=outcome.delete, detail=outcome.detail))
    return spread_out
