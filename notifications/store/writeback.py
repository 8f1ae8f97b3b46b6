"""The tick's write-back, in one place: finished batches waiting for their write
(`WriteBack`, at most every WRITE_INTERVAL), what one write stores (`save_outcomes`: each
batch's outcomes, the rows its claim could not load, the delivery log's records, the
addresses refused for good, what the batch adds to the monitoring totals), and the
records and totals themselves, built in the tick's own thread from the results its
workers handed back (`attempt_records`, `delivery_counts`).

Each write takes the database's write lock; on SQLite the host site's own writes wait for
it, so a draining tick writes a few times a second, not once per batch.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django.db import DatabaseError, DataError, IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from notifications import otel
from notifications.channels import ChannelResult, Firing, registry
from notifications.conf import Policy, TickSettings
from notifications.models import DeliveryAttempt, Notification, Suppression, states
from notifications.models.addresses import is_address, storable
from notifications.models.log import SENT_TO_CHARS, SUMMARY_CHARS
from notifications.outcomes import Kind, Outcome, settling
from notifications.rules.remote_text import REASON_CHARS, clip, one_line
from notifications.store import digests, reconnecting, tallies
from notifications.store.claims import lease_end, release_tokens
from notifications.store.statements import ids_in, insert_statements, lock_in_order, unsaved
from notifications.store.tallies import DEAD_LETTERED, DEFERRED, DELIVERED, EXPIRED, FAILED, OTHER, Key

logger = logging.getLogger("notifications")


class Unloadable(NamedTuple):
    """The rows of one claim the ORM could not load (`claims.Claim.unloadable`), dead-lettered
    by the claim's write-back: its token, its moment, pk -> why."""

    token: uuid.UUID
    now: datetime
    rows: Mapping[Any, str]


# Claims and write-backs take the database's write lock, which on SQLite is the host
# site's too: a draining tick writes finished batches back at most this often (seconds).
WRITE_INTERVAL = 0.25

# A row's targets: channel -> where it delivers (`notifications.flow.targets`), worked out
# once per firing by the tick and carried with it.
Targets = Mapping[str, str]


class Finished(Protocol):
    """A claimed batch whose every row has an outcome (`notifications.tick.dispatch.Batch`)."""

    token: uuid.UUID
    now: datetime
    outcomes: list[Outcome]
    attempts: list[DeliveryAttempt]
    unloadable: dict[Any, str]
    targets: dict[Any, dict[str, str]]


@dataclass
class Written:
    """What one write did: the batches it stored, the unloadable rows it dead-lettered,
    or the database error that kept the batches for the next write."""

    batches: list[Finished] = field(default_factory=list)
    dead: int = 0
    error: Exception | None = None

    @property
    def outcomes(self) -> list[Outcome]:
        return [o for b in self.batches for o in b.outcomes]


class WriteBack:
    """The finished batches of one tick waiting for their write-back, and the write itself."""

    def __init__(self, policy: Policy, lease: float | None = None) -> None:
        self.policy = policy
        self.lease = lease  # of the claims it keeps (`Outcome.still_sending`); None: the settings'
        self.finished: list[Finished] = []  # batches with every outcome, not yet written back
        self.next_write = time.monotonic()

    def write(self, *, force: bool, last: bool = False) -> Written:
        """Write finished batches back in one transaction, at most every WRITE_INTERVAL.

        `force` writes at once (nothing in flight, or the tick is ending). `save_outcomes`
        retries a lost connection or deadlock itself. When it still fails, the batches wait
        for the next write and the error is returned (the tick then claims no more and ends
        once what it holds is done); the `last` write that fails raises it (see `abandon`).
        """
        if not self.finished or (not force and time.monotonic() < self.next_write):
            return Written()
        batches, self.finished = self.finished, []
        counts = delivery_counts(batches)
        try:
            try:
                dead = save_outcomes(
                    [(b.token, b.outcomes) for b in batches],
                    [a for b in batches for a in b.attempts],
                    counts,
                    unloadable=[Unloadable(b.token, b.now, b.unloadable) for b in batches if b.unloadable],
                    policy=self.policy,
                    lease=self.lease,
                )
            except (*reconnecting.DATABASE_ERRORS, ValueError, TypeError) as exc:
                if not _of_the_values(exc):
                    raise
                return self.write_alone(batches, exc)
        except reconnecting.DATABASE_ERRORS as exc:
            batches = [b for b in batches if b.outcomes or b.unloadable]  # write_alone may have written some
            if last:
                self.abandon(batches)
                raise
            code = reconnecting.error_code(exc)
            logger.error("write-back failed; kept for the next one: %s (%s)", type(exc).__name__, code)
            self.finished = batches + self.finished
            self.next_write = time.monotonic() + WRITE_INTERVAL
            return Written(error=exc)
        otel.count_deliveries(counts)
        self.next_write = time.monotonic() + WRITE_INTERVAL
        return Written(batches, dead)

    def write_alone(self, batches: list[Finished], exc: Exception) -> Written:
        """The write of `batches` failed on what some row holds (`exc`: a value its column
        refuses): write each firing alone, and one whose own write fails again as an
        internal failure of that row (`unstorable`), so one row's outcome never keeps its
        batch claimed to be sent again when the lease ends. Rare: `channels.results`
        cleans what channels return before it gets here.

        When the connection fails meanwhile, what was written leaves the batches (so it
        is not written twice) and the error is raised: the rest waits for the next write."""
        logger.error("write-back refused a value (%s); writing its rows one by one", type(exc).__name__)
        dead = 0
        written: list[Finished] = []
        for batch in batches:
            if batch.unloadable:
                dead += save_outcomes(
                    [(batch.token, [])],
                    [],
                    unloadable=[Unloadable(batch.token, batch.now, batch.unloadable)],
                    policy=self.policy,
                )
                batch.unloadable = {}
            done: list[Outcome] = []
            try:
                for outcome in list(batch.outcomes):
                    done.append(self.write_one(batch, outcome))
                    batch.outcomes.remove(outcome)
            finally:
                if done:
                    written.append(_part_of(batch, done))
        otel.count_deliveries(delivery_counts(written))
        self.next_write = time.monotonic() + WRITE_INTERVAL
        return Written(written, dead)

    def write_one(self, batch: Finished, outcome: Outcome) -> Outcome:
        """Write one firing's outcome alone; the outcome written (an internal failure when
        its own was refused)."""
        attempts = [a for a in batch.attempts if a.notification_id == outcome.row.pk]
        try:
            save_outcomes(
                [(batch.token, [outcome])],
                attempts,
                _counts_of(outcome, batch.targets.get(outcome.row.pk, {})),
                lease=self.lease,
            )
        except (*reconnecting.DATABASE_ERRORS, ValueError, TypeError) as error:
            if not _of_the_values(error):
                raise
            return self.unstorable(batch, outcome, error)
        return outcome

    def unstorable(self, batch: Finished, outcome: Outcome, exc: Exception) -> Outcome:
        """Fail the row whose outcome its columns refuse, as an internal error (retried, or
        dead-lettered once its retries run out), from its state as claimed: nothing of what
        its channels answered is kept. Logged; the delivery log keeps no record of it."""
        row = outcome.row
        logger.error("notification %s: its outcome could not be stored (%s); failed", row.pk, type(exc).__name__)
        if not row.digest_rows:  # a digest settles as one: its rows are the ones in memory
            row = Notification.objects.filter(pk=row.pk, claim_token=batch.token).first() or row
        failed = settling.settle_internal_error(
            row, Unstorable(f"its outcome could not be stored ({type(exc).__name__})"), batch.now, self.policy
        )
        try:
            save_outcomes([(batch.token, [failed])], [], _counts_of(failed, batch.targets.get(row.pk, {})))
        except (*reconnecting.DATABASE_ERRORS, ValueError, TypeError) as error:
            if not _of_the_values(error):
                raise
            logger.error(
                "notification %s: not even its failure could be stored (%s); it waits for the lease",
                row.pk,
                type(error).__name__,
            )
        return failed

    def abandon(self, batches: list[Finished]) -> None:
        """The write-back gave up for good: release the rows of `batches` that were not sent
        (released, deferred or held: nothing went out), so they do not wait for the lease.

        Rows that were sent keep their claim: releasing them would make them due at once
        and send them again, the very duplicate the write-back's retries are there to
        avoid. Their outcome is lost with the database; when the lease ends another tick
        sends them again (at least once, as after a tick killed between send and write).
        """
        unsent = [o.row.pk for b in batches for o in b.outcomes if o.kind in (Kind.RELEASED, Kind.DEFERRED)]
        try:
            release_tokens([b.token for b in batches], only=unsent)
        except reconnecting.DATABASE_ERRORS:
            logger.error("%d unsent rows stay claimed until the lease ends", len(unsent))


@dataclass
class _Part:
    """The part of a batch `WriteBack.write_alone` wrote (a `Finished`)."""

    token: uuid.UUID
    now: datetime
    outcomes: list[Outcome]
    attempts: list[DeliveryAttempt]
    unloadable: dict[Any, str]
    targets: dict[Any, dict[str, str]]


def _part_of(batch: Finished, outcomes: list[Outcome]) -> Finished:
    pks = {o.row.pk for o in outcomes}
    attempts = [a for a in batch.attempts if a.notification_id in pks]
    batch.attempts = [a for a in batch.attempts if a.notification_id not in pks]
    return _Part(batch.token, batch.now, outcomes, attempts, {}, batch.targets)


class Unstorable(Exception):
    """A row's outcome its columns refused (`WriteBack.unstorable`)."""


# MariaDB/MySQL's refusals of a value in strict mode (the driver may raise them as an
# OperationalError): incorrect string or other value, too long, out of range, truncated,
# NULL in a NOT NULL column, invalid UTF-8.
MYSQL_VALUE_REFUSED = {1048, 1264, 1265, 1292, 1300, 1366, 1406}
# What a write raises for a row's values: the database refused one (DataError, a
# constraint), or Django could not even convert it for its column (ValueError, TypeError).
VALUE_ERRORS = (DataError, IntegrityError, ValueError, TypeError)


def _of_the_values(exc: Exception) -> bool:
    """Whether a write failed on what the rows hold rather than on the database (a lost
    connection, a deadlock, a read-only or failing server): writing the rows one by one
    finds the row it was."""
    return isinstance(exc, VALUE_ERRORS) or reconnecting.error_code(exc) in MYSQL_VALUE_REFUSED


def attempt_records(firing: Firing | None, results: list[ChannelResult], targets: Targets) -> list[DeliveryAttempt]:
    """The delivery log's records of one firing: one per channel result."""
    if firing is None:
        return []
    row = firing.notification
    # The firing's own id: a recurring row holds its next firing's by now.
    firing_id = uuid.UUID(firing.firing_id)
    return [
        unsaved(
            DeliveryAttempt,
            {
                "notification_id": row.pk,
                "firing_id": firing_id,
                "channel": r.channel,
                "target": targets.get(r.channel, ""),
                "recipient": row.recipient,
                "sent_to": clip(r.sent_to, SENT_TO_CHARS),
                "summary": clip(r.summary, SUMMARY_CHARS),
                "outcome": DeliveryAttempt.AttemptOutcome.OK if r.ok else DeliveryAttempt.AttemptOutcome.FAILED,
                "error": r.error or "",
                "error_class": r.error_class.value if r.error_class and not r.ok else "",
                "http_status": r.http_status,
                "duration_ms": round(r.duration * 1000),
                "attempted_at": firing.fired_at,
            },
        )
        for r in results
    ]


def delivery_counts(batches: Iterable[Finished]) -> Counter[Key]:
    """What the batches' outcomes add to the delivery totals (see `notifications.store.tallies`):
    deliveries by channel, target and outcome."""
    counts: Counter[Key] = Counter()
    for batch in batches:
        for outcome in batch.outcomes:
            _add_counts(counts, outcome, batch.targets.get(outcome.row.pk, {}))
    return counts


def _counts_of(outcome: Outcome, targets: Targets) -> Counter[Key]:
    counts: Counter[Key] = Counter()
    _add_counts(counts, outcome, targets)
    return counts


def _add_counts(counts: Counter[Key], outcome: Outcome, targets: Targets) -> None:
    """Add what one outcome counts to `counts` (in place: a write-back counts thousands)."""
    kind = outcome.kind
    if kind == Kind.RELEASED:
        return
    for result in outcome.results:
        counts[(result.channel, targets.get(result.channel, ""), DELIVERED if result.ok else FAILED)] += 1
    if kind not in (Kind.DEFERRED, Kind.EXPIRED, Kind.DEAD_LETTERED, Kind.RETRIED):
        return  # delivered, held, ...: the results are all it counts
    # A row written around validation may name any channel: counted as `other`.
    owed = [channel if registry.known(channel) else OTHER for channel in outcome.row.owed_channels]
    if kind == Kind.DEFERRED:
        counts.update((channel, targets.get(channel, ""), DEFERRED) for channel in owed)
    elif kind == Kind.EXPIRED:
        counts.update((channel, targets.get(channel, ""), EXPIRED) for channel in owed)
    else:  # dead-lettered or retried
        failed = [r.channel for r in outcome.results if not r.ok]
        if not outcome.results:  # an internal error or an invalid row: nothing was attempted
            failed = owed
            counts.update((channel, targets.get(channel, ""), FAILED) for channel in failed)
        if kind == Kind.DEAD_LETTERED:
            counts.update((channel, targets.get(channel, ""), DEAD_LETTERED) for channel in failed)


# Fields a write-back may change; one bulk UPDATE sets them all.
WRITE_BACK_FIELDS = [
    "next_fire_at",
    "firing_due_at",
    "last_fired_at",
    "error_count",
    "last_error",
    "previous_error",
    "dead_lettered_at",
    "expired_at",
    "firing_id",
    "escalation_of",
    "pending_channels",
    "pending_recipients",
    "failed_channels",
    "claim_token",
    "claimed_until",
    "held_for",
    "updated_at",
]
# What a digest's rows share with the row that was sent (`digests.spread`): the whole
# firing's state, but not `firing_due_at`, each row's own due time.
DIGEST_SHARED_FIELDS = [name for name in WRITE_BACK_FIELDS if name != "firing_due_at"]


# A deferred row's write-back: the due time moves (the firing's own due time is kept, or
# moved with it by quiet hours), the claim goes, nothing else changes (`held_for` names the
# open circuit holding it, if one does; `pending_channels` the channels still owed when some
# went out and the rest did not get their turn).
DEFER_FIELDS = [
    "next_fire_at",
    "firing_due_at",
    "claim_token",
    "claimed_until",
    "held_for",
    "pending_channels",
    "updated_at",
]


def save_outcomes(
    batches: Iterable[tuple[uuid.UUID, Iterable[Outcome]]],
    attempts: Sequence[DeliveryAttempt],
    counts: Mapping[tallies.Key, int] | None = None,
    *,
    unloadable: Sequence[Unloadable] = (),
    policy: Policy | None = None,
    lease: float | None = None,
) -> int:
    """Write batches back in one short transaction: the rows locked in primary-key order,
    one DELETE, one bulk UPDATE, one UPDATE for released rows, the INSERT of the delivery
    log and the upsert of the monitoring totals (`counts`, from `delivery_counts`).
    Rows a batch's claim could not load (`unloadable`) are dead-lettered
    in the same transaction, one UPDATE each (`policy` gives their `error_count`); returns
    how many were.

    Fenced by the batches' claim tokens: rows whose claim expired and passed to another
    tick are left alone. On SQLite the transaction holds the database's write lock,
    which the host site's writes wait for: the delivery log's statements are prepared
    before it begins.

    A lost connection or a lost deadlock is retried, on a new connection where the old
    one broke (`reconnecting.retry`): the rows were delivered, and a write-back given up
    would leave them claimed until the lease ends, then send them again. Running it twice
    is safe: a failed transaction wrote nothing, and the claim tokens fence the rows. Only
    an error at COMMIT leaves it unknown whether the transaction took; the retry then
    looks for what it wrote (`_already_written`) before writing again, so the delivery
    log and the totals are not counted twice.

    A row whose send still runs (`Outcome.still_sending`) keeps its claim, for `lease`
    seconds from now (default NOTIFICATIONS_LEASE): its outcome is written, but no tick
    claims it again while the tick that left the send behind renews the claim.
    """
    tokens: list[uuid.UUID] = []
    outcomes: list[Outcome] = []
    held: dict[uuid.UUID, list[Any]] = {}
    for token, batch in batches:
        tokens.append(token)
        for outcome in batch:
            outcomes.append(outcome)
            if outcome.still_sending and not outcome.delete:
                held.setdefault(token, []).append(outcome.row.pk)
    outcomes = digests.spread(outcomes, DIGEST_SHARED_FIELDS)  # a digest settles as one: every row of it
    if not tokens:
        return 0
    unloadable = [batch for batch in unloadable if batch.rows]
    log = insert_statements(DeliveryAttempt, attempts)
    committing = False
    dead = 0
    logged = attempts  # the records the last try wrote

    def write() -> None:
        nonlocal committing, dead, logged
        if committing and _already_written(tokens, outcomes, logged, unloadable):
            logger.warning("write-back: the failed COMMIT had taken; not written again")
            return
        committing = False
        with transaction.atomic():
            holding = _still_claimed(held)  # before the statements that release them
            dead, logged = _write(tokens, outcomes, log, attempts, counts, unloadable, policy)
            if holding:
                _keep_claimed(holding, lease or TickSettings.read().lease)
            committing = True  # from here on an error is the COMMIT's own: did it take?

    reconnecting.retry(write, "write-back")
    return dead


def _write(
    tokens: list[uuid.UUID],
    outcomes: list[Outcome],
    log: list[tuple[str, list[Any]]],
    attempts: Sequence[DeliveryAttempt],
    counts: Mapping[tallies.Key, int] | None,
    unloadable: Sequence[Unloadable],
    policy: Policy | None,
) -> tuple[int, Sequence[DeliveryAttempt]]:
    """The statements of `save_outcomes`, inside its transaction; returns how many
    unloadable rows were dead-lettered, and the delivery records written."""
    doomed = [o.row.pk for o in outcomes if o.delete]
    released = [o.row.pk for o in outcomes if o.kind == Kind.RELEASED]
    deferred = [o.row for o in outcomes if o.kind == Kind.DEFERRED]
    kept = [o.row for o in outcomes if not o.delete and o.kind not in (Kind.RELEASED, Kind.DEFERRED)]
    refused = [refusal for o in outcomes for result in o.results for refusal in result.refused]
    inserts = [item for o in outcomes for result in o.results if result.ok for item in result.inserts]
    claimed = Notification.objects.filter(claim_token__in=tokens)
    pks = [o.row.pk for o in outcomes]
    present = lock_in_order(pks + [pk for batch in unloadable for pk in batch.rows])  # the rows that still exist
    if present is None and (log or inserts or refused):  # SQLite (its write lock holds all): read first
        present = set(Notification.objects.filter(pk__in=pks).values_list("pk", flat=True))
    matched = 0  # rows the fenced statements found still claimed by the batches
    if doomed:
        # Attachments' files go with their rows; only rows with some cost a look-up.
        with_files = any(o.row.attachments for o in outcomes if o.delete)
        deleted = claimed.filter(ids_in(doomed)).delete(with_attachments=with_files)[1]
        matched += deleted.get(Notification._meta.label, 0)
    if kept:
        matched += claimed.bulk_update(kept, WRITE_BACK_FIELDS)
    if deferred:
        matched += claimed.bulk_update(deferred, DEFER_FIELDS)
    if released:
        matched += claimed.filter(ids_in(released)).update(claim_token=None, claimed_until=None)
    trimmed = (log or inserts or refused) and matched < len(doomed) + len(kept) + len(deferred) + len(released)
    if trimmed:
        # Some row went while it was in flight (erased, cancelled), or an erasure took its
        # firing back: its firing's records go with it, as its row did (SPEC: rows in flight
        # write nothing back afterwards), and so do its refusals: suppressing them would
        # put back the address of a person erased with keep_suppression=False.
        taken_back = Notification.objects.filter(states.TAKEN_BACK, pk__in=pks).values_list("pk", flat=True)
        present = (present or set()) - set(taken_back)
        attempts = _of_rows_left(attempts, outcomes, present)
        log = insert_statements(DeliveryAttempt, attempts) if log else log
        refused = [r for o in outcomes if o.row.pk in present for result in o.results for r in result.refused]
    if log:
        with connection.cursor() as cursor:
            for sql, params in log:
                cursor.execute(sql, params)
    if inserts:
        insert_delivered(_of_rows_left(inserts, outcomes, present or set()) if trimmed else inserts)
    dead = _dead_letter_unloadable(unloadable, policy or Policy.from_settings()) if unloadable else 0
    if refused:  # addresses refused for good, by the rows still there to write back
        suppress(refused)
    # Last: the totals' rows are shared by every tick, so their locks are held briefly.
    if counts:
        tallies.add_deliveries(counts)
    return dead, attempts


def _still_claimed(held: Mapping[uuid.UUID, list[Any]]) -> dict[uuid.UUID, list[Any]]:
    """The rows of `held` still claimed with their batch's token (one SELECT per token)."""
    found = {
        token: list(Notification.objects.filter(claim_token=token, pk__in=pks).values_list("pk", flat=True))
        for token, pks in held.items()
    }
    return {token: pks for token, pks in found.items() if pks}


def _keep_claimed(holding: Mapping[uuid.UUID, list[Any]], lease: float) -> None:
    """Claim the rows again, with the token they had, for `lease` seconds from now."""
    for token, pks in holding.items():
        Notification.objects.filter(pk__in=pks).update(claim_token=token, claimed_until=lease_end(lease))


def insert_delivered(items: Sequence[Any]) -> None:
    """Insert what channels delivered into the site's tables (`ChannelResult.inserts`), one
    multi-row INSERT per model; a row whose unique key is already there (the same firing,
    written back before) is left as it is."""
    by_model: dict[type[Model], list[Any]] = {}
    for item in items:
        by_model.setdefault(type(item), []).append(item)
    for model, found in by_model.items():
        model._default_manager.bulk_create(found, ignore_conflicts=True)


def _of_rows_left(attempts: Sequence[Any], outcomes: list[Outcome], present: set[Any]) -> list[Any]:
    """The records of firings a row of which existed when the write-back began (`present`,
    read under its locks; a row whose firing an erasure took back counts as gone). A row
    whose claim passed to another tick still exists: the record of what this tick sent stays."""
    rows_of_firing = {o.row.pk: [r.pk for r in o.row.digest_rows] or [o.row.pk] for o in outcomes}
    return [
        a for a in attempts if any(pk in present for pk in rows_of_firing.get(a.notification_id, [a.notification_id]))
    ]


def _already_written(
    tokens: list[uuid.UUID],
    outcomes: list[Outcome],
    attempts: Sequence[DeliveryAttempt],
    unloadable: Sequence[Unloadable],
) -> bool:
    """After an error at COMMIT: whether the write-back took all the same.

    Its delivery records are there if it did (each names its row, firing, channel and
    moment: no other write-back has that one). Without records (only deferred, held or
    released rows), no row of the batch still holds its claim token once it took.
    """
    if attempts:
        first = attempts[0]
        return DeliveryAttempt.objects.filter(
            notification_id=first.notification_id,
            firing_id=first.firing_id,
            channel=first.channel,
            attempted_at=first.attempted_at,
        ).exists()
    pks = [o.row.pk for o in outcomes] + [pk for batch in unloadable for pk in batch.rows]
    return not Notification.objects.filter(claim_token__in=tokens, pk__in=pks).exists()


def _dead_letter_unloadable(unloadable: Sequence[Unloadable], policy: Policy) -> int:
    """Dead-letter claimed rows the ORM could not load, by id, without reading them.

    Such a row reached the table some other way (raw SQL) holding a value no code can
    convert; it is parked (`next_fire_at` NULL, so a recurring one stops too) for an
    operator, with the conversion error in `last_error`. Fenced by the claim token.
    """
    dead = 0
    for token, now, rows in unloadable:
        for pk, error in rows.items():
            logger.error("notification %s: cannot be loaded (%s); dead-lettered", pk, error)
            dead += Notification.objects.filter(pk=pk, claim_token=token).update(
                dead_lettered_at=now,
                next_fire_at=None,
                error_count=policy.max_retries,
                last_error=f"invalid: cannot load the row: {error}",
                previous_error=None,
                failed_channels=None,
                claim_token=None,
                claimed_until=None,
                updated_at=now,
            )
    return dead


def suppress(refusals: Iterable[tuple[str, str]], now: datetime | None = None) -> int:
    """Add (address, reason) pairs to the suppression list; an address already there keeps
    its entry, and what is not a valid address is left out (a provider's prose read as
    one). The tick's write-back and django-anymail's tracking signal call this.

    Addresses are stored as `addresses.normalise` spells them. One the list cannot hold
    (longer than its column, a NUL: `addresses.storable`) is left out and logged, and the
    INSERT runs in a savepoint of its own: a refusal never undoes the write-back around it.
    Returns how many entries were new or already there.
    """
    entries: dict[str, Suppression] = {}
    for address, reason in refusals:
        if not isinstance(address, str):
            continue
        key = storable(address)
        if key is not None and not is_address(key):
            logger.warning("not suppressed: not an email address")
            continue
        if key is None:
            logger.warning("not suppressed: an address the suppression list cannot hold (%d characters)", len(address))
            continue
        if key not in entries:
            entries[key] = Suppression(
                address=key, reason=one_line(str(reason), REASON_CHARS), created_at=now or timezone.now()
            )
    if not entries:
        return 0
    try:
        with transaction.atomic():
            Suppression.objects.bulk_create(entries.values(), ignore_conflicts=True)
    except DatabaseError as exc:
        logger.error("could not store %d suppressed addresses: %s", len(entries), type(exc).__name__)
        return 0
    return len(entries)
