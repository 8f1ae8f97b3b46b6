"""Persisting a batch: the write-back of a tick's outcomes (`save_outcomes`, with the rows
its claim could not load), the rows a closed circuit held (`release_held`), the
suppression list (`suppress`), the delivery log's INSERTs and the public signals."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import DatabaseError, connection, transaction
from django.db.models import DateTimeField, Field, Model, UUIDField
from django.utils import timezone

from notifications import compat
from notifications.conf import Policy
from notifications.models import DeliveryAttempt, Notification, Suppression, states
from notifications.models.addresses import is_address, storable
from notifications.outcomes import Kind, Outcome
from notifications.services import digests, reconnecting, tallies

logger = logging.getLogger("notifications")


class Unloadable(NamedTuple):
    """The rows of one claim the ORM could not load (`claims.Claim.unloadable`), dead-lettered
    by the claim's write-back: its token, its moment, pk -> why."""

    token: uuid.UUID
    now: datetime
    rows: Mapping[Any, str]


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
) -> int:
    """Write batches back in one short transaction: the rows locked in primary-key order,
    one DELETE, one bulk UPDATE, one UPDATE for released rows, the INSERT of the delivery
    log and the upsert of the monitoring totals (`counts`, from `notifications.tick.writing`).
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
    """
    tokens: list[uuid.UUID] = []
    outcomes: list[Outcome] = []
    for token, batch in batches:
        tokens.append(token)
        outcomes.extend(batch)
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
            dead, logged = _write(tokens, outcomes, log, attempts, counts, unloadable, policy)
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
    claimed = Notification.objects.filter(claim_token__in=tokens)
    pks = [o.row.pk for o in outcomes]
    present = lock_in_order(pks + [pk for batch in unloadable for pk in batch.rows])  # the rows that still exist
    if present is None and log:  # SQLite (its write lock holds them all): read before the DELETE
        present = set(Notification.objects.filter(pk__in=pks).values_list("pk", flat=True))
    matched = 0  # rows the fenced statements found still claimed by the batches
    if doomed:
        # Attachments' files go with their rows; only rows with some cost a look-up.
        with_files = any(o.row.attachments for o in outcomes if o.delete)
        matched += claimed.filter(pk__in=doomed).delete(with_attachments=with_files)[1].get(Notification._meta.label, 0)
    if kept:
        matched += claimed.bulk_update(kept, WRITE_BACK_FIELDS)
    if deferred:
        matched += claimed.bulk_update(deferred, DEFER_FIELDS)
    if released:
        matched += claimed.filter(pk__in=released).update(claim_token=None, claimed_until=None)
    if log and matched < len(doomed) + len(kept) + len(deferred) + len(released):
        # Some row went while it was in flight (erased, cancelled), or an erasure took its
        # firing back: its firing's records go with it, as its row did (SPEC: rows in flight
        # write nothing back afterwards).
        taken_back = Notification.objects.filter(states.TAKEN_BACK, pk__in=pks).values_list("pk", flat=True)
        attempts = _of_rows_left(attempts, outcomes, (present or set()) - set(taken_back))
        log = insert_statements(DeliveryAttempt, attempts)
    if log:
        with connection.cursor() as cursor:
            for sql, params in log:
                cursor.execute(sql, params)
    dead = _dead_letter_unloadable(unloadable, policy or Policy.from_settings()) if unloadable else 0
    if refused:  # addresses refused for good, whatever became of the claim
        suppress(refused)
    # Last: the totals' rows are shared by every tick, so their locks are held briefly.
    if counts:
        tallies.add_deliveries(counts)
    return dead, attempts


def _of_rows_left(
    attempts: Sequence[DeliveryAttempt], outcomes: list[Outcome], present: set[Any]
) -> list[DeliveryAttempt]:
    """The records of firings a row of which existed when the write-back began (`present`,
    read under its locks; a row whose firing an erasure took back counts as gone). A row
    whose claim passed to another tick still exists: the record of what this tick sent stays."""
    rows_of_firing = {o.row.pk: [r.pk for r in o.row.digest_rows] or [o.row.pk] for o in outcomes}
    return [
        a for a in attempts if any(pk in present for pk in rows_of_firing.get(a.notification_id, [a.notification_id]))
    ]


def lock_in_order(pks: Iterable[Any]) -> set[Any] | None:
    """Lock the rows `pks` in primary-key order, in one statement (inside a transaction);
    returns those that exist (None on SQLite, which locks nothing row by row).

    Every writer of several rows takes their locks in this one order (the write-back here,
    `act` and `purge` in `services.actions`), so two of them never wait on each other in a
    circle: one waits, the other finishes. Without it a write-back took its DELETE's rows,
    then its UPDATE's, and deadlocked with an operator's purge or a host's cancel. Only
    by primary key: a lookup by claim token could walk that index in its own order.
    SQLite locks the whole database instead: nothing to do there.
    """
    ordered = sorted(set(pks))
    if not connection.features.has_select_for_update:
        return None
    if not ordered:
        return set()
    return set(
        Notification.objects.filter(pk__in=ordered).order_by("pk").select_for_update().values_list("pk", flat=True)
    )


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


def release_held(key: str, now: datetime) -> int:
    """Make the rows held for target `key` due now (its circuit closed; one UPDATE over the
    held index). The breaker calls it when a circuit closes or did not open after all."""
    return Notification.objects.filter(held_for=key).update(next_fire_at=now, held_for=None, updated_at=now)


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
            entries[key] = Suppression(address=key, reason=_clean_text(reason)[:200], created_at=now or timezone.now())
    if not entries:
        return 0
    try:
        with transaction.atomic():
            Suppression.objects.bulk_create(entries.values(), ignore_conflicts=True)
    except DatabaseError as exc:
        logger.error("could not store %d suppressed addresses: %s", len(entries), type(exc).__name__)
        return 0
    return len(entries)


def _clean_text(text: object) -> str:
    """Text any database stores: no NUL, no lone surrogate."""
    value = str(text).replace("\x00", "")
    return value.encode("utf-8", "replace").decode("utf-8")


def insert_statements(model: type[Model], objs: Sequence[Model]) -> list[tuple[str, list[Any]]]:
    """Multi-row INSERTs of `objs`: bulk_create's result without its per-row SQL compiling.

    The delivery log gets a row per channel per firing; at thousands of rows a second,
    compiling bulk_create's multi-row VALUES dominated the write-back. One statement per
    chunk rather than an executemany: on SQLite the write lock is held across the
    statements, and each executemany row is a step that waits for Python's GIL again.
    Values go through each field's own database preparation, so every backend stores
    them as bulk_create would. For models without save() logic: no signals, no pre_save.
    """
    fields = [f for f in compat.concrete_fields(model) if not f.primary_key]
    prepare = [_preparer(f) for f in fields]
    per_statement = compat.rows_per_statement(connection, fields, objs)  # the backend's parameter limit
    placeholders = "({})".format(", ".join(["%s"] * len(fields)))
    statements = []
    for start in range(0, len(objs), per_statement):
        chunk = objs[start : start + per_statement]
        # Only quoted model metadata goes into the text; values are parameters.
        sql = "INSERT INTO {} ({}) VALUES {}".format(  # noqa: S608
            compat.quote_name(connection, model._meta.db_table),
            ", ".join(compat.quote_name(connection, f.column) for f in fields),
            ", ".join([placeholders] * len(chunk)),
        )
        statements.append(
            (sql, [p(getattr(obj, f.attname)) for obj in chunk for f, p in zip(fields, prepare, strict=True)])
        )
    return statements


def update_rows(model: type[Model], objs: Sequence[Model], field_names: Sequence[str]) -> int:
    """Save `field_names` of `objs` (by primary key) with one UPDATE statement run for each
    row (an executemany); returns how many rows were given.

    bulk_update's result without its cost: bulk_update builds a CASE expression per field
    with a branch per row, whose compiling (and, on PostgreSQL, evaluation) grows with the
    square of the rows. Values go through each field's own database preparation, as in
    `insert_statements`. The caller holds the rows (locked, in its transaction).
    """
    if not objs:
        return 0
    meta = model._meta
    by_name = {f.name: f for f in compat.concrete_fields(model)}
    fields = [by_name[name] for name in field_names]  # KeyError: not a concrete field
    prepare = [_preparer(f) for f in fields]
    pk_column = str(meta.pk.column) if meta.pk is not None else "id"
    # Only quoted model metadata goes into the text; values are parameters.
    sql = "UPDATE {} SET {} WHERE {} = %s".format(  # noqa: S608
        compat.quote_name(connection, meta.db_table),
        ", ".join(f"{compat.quote_name(connection, str(f.column))} = %s" for f in fields),
        compat.quote_name(connection, pk_column),
    )
    params = [[p(getattr(obj, f.attname)) for f, p in zip(fields, prepare, strict=True)] + [obj.pk] for obj in objs]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
    return len(objs)


def _preparer(field: Field[Any, Any]) -> Callable[[Any], Any]:
    """The cheapest correct conversion of one field's Python value for the database."""
    if field.get_internal_type() in _PLAIN_TYPES:
        return lambda value: value
    if field.is_relation and compat.relation_target(field).get_internal_type() in ("AutoField", "BigAutoField"):
        return lambda value: value if type(value) is int else field.get_db_prep_save(value, connection)
    if isinstance(field, UUIDField) and not compat.stores_uuid_natively(connection):
        return lambda value: value.hex if isinstance(value, uuid.UUID) else field.get_db_prep_save(value, connection)
    if isinstance(field, DateTimeField):
        adapt = compat.datetime_adapter(connection)
        return lambda value: None if value is None else adapt(value)
    return lambda value: field.get_db_prep_save(value, connection)


# Field types whose Python values (str, int, None) the database drivers take as they are.
_PLAIN_TYPES = {
    "CharField",
    "TextField",
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "PositiveBigIntegerField",
}


def announce(outcomes: Iterable[Outcome]) -> None:
    """Send the public signals for a batch that has been written back."""
    from notifications import signals

    by_kind = {
        Kind.SUCCEEDED: signals.notification_delivered,
        Kind.PARTIAL: signals.notification_partially_delivered,
        Kind.DEAD_LETTERED: signals.notification_dead_lettered,
        Kind.EXPIRED: signals.notification_expired,
    }
    for outcome in outcomes:
        signal = by_kind.get(outcome.kind)
        if signal is None or not signal.has_listeners(Notification):
            continue
        errors = {r.channel: r.error for r in outcome.results if r.error}
        sent = signal.send_robust(Notification, notification=outcome.row, results=outcome.results, errors=errors)
        for receiver, response in sent:
            if isinstance(response, Exception):
                logger.error("signal receiver %r failed: %r", receiver, response)
