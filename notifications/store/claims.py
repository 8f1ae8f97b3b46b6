"""Claiming due rows for one tick: one conditional UPDATE, fenced by a fresh token.

Two ticks running at once, on one host or many, on any supported database, never claim
the same row: PostgreSQL, MariaDB and MySQL skip rows another tick is claiming (FOR UPDATE
SKIP LOCKED) and SQLite runs the single UPDATE under its database write lock. A claim lives for the
lease; a tick that dies leaves rows that become claimable again when it expires.

Due rows are claimed by priority (`now`, `high`, `normal`, `low`), then oldest due time
first. A `low` row due for longer than NOTIFICATIONS_LOW_PRIORITY_AGING (an hour by
default) is claimed as a `normal` one (by its due time among them), so a steady stream of
normal rows delays low ones by at most that long and never starves them. The selection
is one statement: a branch per priority, each the oldest `limit` rows of its class read
off an index in order (`notification_priority_idx`; `normal` reads the due index), joined
by UNION ALL and cut to `limit` by (class, due time). A batch costs one index probe per
class, never a sort of the whole backlog.

The claim only marks rows, and they are loaded afterwards: a row written by raw SQL
with a value the ORM cannot convert (a JSON integer of 5,000 digits, JSON nested 5,000
deep, `-infinity`, a malformed UUID, an impossible date) must cost only itself, never
the claim of the healthy rows beside it. Rows that load are checked as they enter the
tick (`check`): one written around validation (raw SQL, `bulk_create`) is handed over
apart, with what validation says of it, for the tick to dead-letter.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypeVar

from django.core.signals import setting_changed
from django.db import InterfaceError, OperationalError, connection, connections, router, transaction
from django.db.models import (
    Case,
    DateTimeField,
    ExpressionWrapper,
    IntegerField,
    JSONField,
    Q,
    QuerySet,
    Value,
    When,
    signals,
)
from django.db.models.base import ModelState
from django.db.models.expressions import RawSQL
from django.dispatch import receiver

from notifications import compat
from notifications.channels import registry
from notifications.conf import low_priority_aging
from notifications.databases import DatabaseNow
from notifications.models import Notification, Priority, validation
from notifications.store import reconnecting

logger = logging.getLogger("notifications.tick")
QS = TypeVar("QS", bound=QuerySet[Any, Any])

# Errors that mean the database itself is unwell, not one row: they end the tick
# (rows stay claimed until the lease runs out) instead of condemning healthy rows.
INFRASTRUCTURE_ERRORS = (OperationalError, InterfaceError)
LOAD_ERROR_SHOWN = 200  # characters of a conversion error kept in `last_error`


class Refused(NamedTuple):
    """A claimed row unfit to send: written around validation (`reason`, validation's own
    words), or one whose check raised (`error`: a poison row, an internal error)."""

    row: Notification
    reason: str = ""
    error: Exception | None = None


@dataclass
class Claim:
    """One claim: its token fences the write-back. `rows` loaded and valid; `refused` loaded
    but unfit to send; `unloadable` could not be read."""

    token: uuid.UUID
    rows: list[Notification] = field(default_factory=list)
    unloadable: dict[Any, str] = field(default_factory=dict)  # pk -> why the ORM could not load it
    refused: list[Refused] = field(default_factory=list)
    due: int = 0  # rows the claim of due rows took (`size` before any digest joined)
    more_digests: bool | None = None  # digests claimed too: whether more may be due

    @property
    def size(self) -> int:
        return len(self.rows) + len(self.unloadable) + len(self.refused)


def classes(now: datetime) -> list[Q]:
    """The priority classes in claim order. A row of a priority the app does not know (raw
    SQL) is claimed as `normal` and dead-lettered as invalid, never left behind."""
    aged = now - timedelta(seconds=low_priority_aging())
    return [
        Q(priority=Priority.NOW),
        Q(priority=Priority.HIGH),
        ~Q(priority__in=[Priority.NOW, Priority.HIGH, Priority.LOW]) | Q(priority=Priority.LOW, next_fire_at__lte=aged),
        Q(priority=Priority.LOW, next_fire_at__gt=aged),
    ]


def selection(now: datetime, limit: int, *, lock: bool = False, queues: tuple[str, ...] = ()) -> tuple[str, list[Any]]:
    """SQL (and parameters) of the ids of the next `limit` claimable rows in claim order.

    `lock`: each branch takes its rows FOR UPDATE SKIP LOCKED (PostgreSQL, in a transaction).
    `queues`: only rows of those queues (`runtick --queue`; empty: every queue).

    The ORM compiles each shape once per process (and again after a setting changes):
    between claims only `now`, and `now` less the low-priority aging, change.
    """
    key = (connection.alias, int(limit), lock, tuple(queues))
    shape = _shapes.get(key)
    if shape is None:
        shape = _shapes[key] = _shape(limit, lock, queues)
    if not shape:  # a shape whose text depends on the clock: compiled every time
        return _selection(now, limit, lock=lock, queues=queues)
    sql, constant, slots = shape
    params = list(constant)
    clock = {"now": _prepared(now), "aged": _prepared(now - timedelta(seconds=low_priority_aging()))}
    for index, which in slots:
        params[index] = clock[which]
    return sql, params


# (alias, limit, lock, queues) -> (SQL, parameters, [(index, "now" | "aged")]), or () when
# the SQL cannot be reused: see `_shape`.
_shapes: dict[tuple[Any, ...], tuple[str, list[Any], list[tuple[int, str]]] | tuple[()]] = {}
# Two instants no claim runs at: where they land in the parameters is where the clock goes.
_PROBES = (datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=UTC), datetime(2002, 3, 4, 5, 6, 7, 890123, tzinfo=UTC))


def _prepared(value: datetime) -> Any:
    """`value` as a parameter of `next_fire_at` (what the compiled lookups hold)."""
    return Notification._meta.get_field("next_fire_at").get_db_prep_value(value, connection)


def _shape(limit: int, lock: bool, queues: tuple[str, ...]) -> tuple[str, list[Any], list[tuple[int, str]]] | tuple[()]:
    """The selection compiled at two probe instants: its SQL, the parameters that stay, and
    which of them are `now` or `now` less the aging. () unless the two agree everywhere else."""
    aging = timedelta(seconds=low_priority_aging())
    (sql, first), (other, second) = (_selection(p, limit, lock=lock, queues=queues) for p in _PROBES)
    if sql != other or len(first) != len(second):
        return ()
    slots = []
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        if a == b:
            continue
        for which, offset in (("now", timedelta(0)), ("aged", aging)):
            if a == _prepared(_PROBES[0] - offset) and b == _prepared(_PROBES[1] - offset):
                slots.append((index, which))
                break
        else:
            return ()  # a value derived from the clock some other way: nothing to reuse
    return sql, first, slots


@receiver(setting_changed)
def _forget_shapes(**kwargs: Any) -> None:
    """The retries, the aging and the channels that cancel escalations are settings."""
    _shapes.clear()
    _loaders.clear()


def _selection(now: datetime, limit: int, *, lock: bool, queues: tuple[str, ...]) -> tuple[str, list[Any]]:
    """`selection`, compiled by the ORM."""
    branches: list[str] = []
    params: list[Any] = []
    for rank, condition in enumerate(classes(now)):
        due = Notification.objects.due(now, lease_clock=DatabaseNow()).filter(condition)
        if queues:
            due = due.filter(queue_name__in=queues)
        # Rows that joined a digest go out with it, whole (notifications.services.digests).
        due = due.filter(digest_id__isnull=True).order_by("next_fire_at", "id")
        due = not_cancelled(due)
        query = due.values("id", "next_fire_at")[:limit]
        if lock:
            query = query.select_for_update(skip_locked=True)
        sql, branch_params = query.query.sql_with_params()
        # Only the app's own compiled SQL and integers go into the text; values are parameters.
        branches.append(f"SELECT {rank} AS claim_rank, b{rank}.* FROM ({sql}) b{rank}")  # noqa: S608
        params.extend(branch_params)
    union = " UNION ALL ".join(branches)
    sql = f"SELECT u.id FROM ({union}) u ORDER BY u.claim_rank, u.next_fire_at, u.id LIMIT {int(limit)}"  # noqa: S608
    return sql, params


def not_cancelled(rows: QS) -> QS:
    """`rows` but escalations whose message reached its state: never claimed, so a mark
    committed before the claim wins (`store.escalations` settles them)."""
    cancelled = registry.escalation_cancelled()
    return rows if cancelled is None else rows.exclude(Q(escalation_of__isnull=False) & cancelled)


def due_query(now: datetime, limit: int) -> QuerySet[Notification, Any]:
    """The ids of the next `limit` claimable rows in claim order (see `selection`)."""
    if not connection.features.allow_sliced_subqueries_with_in:  # MariaDB/MySQL: see `mark`
        return Notification.objects.filter(pk__in=selected_ids(now, limit, lock=False)).values("pk")
    return Notification.objects.filter(pk__in=RawSQL(*selection(now, limit))).values("pk")  # noqa: S611 - see selection


def selected_ids(now: datetime, limit: int, *, lock: bool, queues: tuple[str, ...] = ()) -> list[Any]:
    """The ids `selection` picks, read by a statement of their own (MariaDB/MySQL)."""
    with connection.cursor() as cursor:
        cursor.execute(*selection(now, limit, lock=lock, queues=queues))
        return [row[0] for row in cursor.fetchall()]


def claim_order(now: datetime) -> list[Any]:
    """`order_by` arguments that sort rows as the claim takes them: class, due time, id."""
    whens = [When(condition, then=Value(rank)) for rank, condition in enumerate(classes(now))]
    return [Case(*whens, default=Value(2), output_field=IntegerField()), "next_fire_at", "id"]


def claim_rank(row: Notification, aged: datetime) -> int:
    """The class `classes` puts a loaded row in (`aged`: now less the low-priority aging):
    the same rules, asked of the row in Python rather than of the database."""
    if row.priority == Priority.NOW:
        return 0
    if row.priority == Priority.HIGH:
        return 1
    if row.priority == Priority.LOW and row.next_fire_at is not None and row.next_fire_at > aged:
        return 3
    return 2


def in_claim_order(rows: list[Notification], now: datetime) -> list[Notification]:
    """`rows` sorted as `claim_order` sorts them: class, due time, id."""
    aged = now - timedelta(seconds=low_priority_aging())

    def key(row: Notification) -> tuple[Any, ...]:
        due = row.next_fire_at  # set on every claimed row (it was due); None sorts first regardless
        return (claim_rank(row, aged), due is not None, due or aged, row.pk)

    return sorted(rows, key=key)


def claim(now: datetime, limit: int, lease: float, *, queues: tuple[str, ...] = ()) -> Claim:
    """Claim up to `limit` due rows, in claim order, for `lease` seconds, and load them.

    A lost connection or deadlock is retried with a fresh token (`reconnecting.retry`);
    before each retry, whatever the failed attempts' tokens hold is released: a claim
    whose COMMIT took although its answer was lost, or whose rows were marked but not
    loaded. Those rows were never handed to a worker, so releasing them sends nothing
    twice, and they are not kept from every tick until the lease ends.
    """
    tokens: list[uuid.UUID] = []

    def attempt() -> Claim:
        token = uuid.uuid4()
        tokens.append(token)
        if not mark(token, now, limit, lease, queues=queues):
            return Claim(token)
        rows, unloadable = load_claimed(token, now)
        return Claim(token, rows, unloadable)

    claimed = reconnecting.retry(attempt, "claim", before_retry=lambda: release_tokens(tokens))
    claimed.rows, claimed.refused = check(claimed.rows)
    return claimed


def check(rows: list[Notification]) -> tuple[list[Notification], list[Refused]]:
    """`rows` as validation finds them: those fit to send, and those refused, saying why.
    Changes nothing; a row whose check raises costs only itself."""
    fit: list[Notification] = []
    refused: list[Refused] = []
    with validation.batch():  # the settings read, and the URLs the rows repeat parsed, once a claim
        for row in rows:
            _check_one(row, fit, refused)
    return fit, refused


def _check_one(row: Notification, fit: list[Notification], refused: list[Refused]) -> None:
    try:
        errors = validation.field_errors(row)
    except Exception as exc:  # a poison row costs only itself
        logger.exception("notification %s: internal error", row.pk)
        refused.append(Refused(row, error=exc))
        return
    if errors:
        refused.append(Refused(row, validation.describe(errors)))
    else:
        fit.append(row)


def release_tokens(tokens: list[uuid.UUID], only: list[Any] | None = None) -> int:
    """Hand back every row still claimed with one of `tokens` (or only those of them whose
    ids are in `only`): rows nothing was sent for, due again at once. Returns how many."""
    if not tokens or only == []:
        return 0
    claimed = Notification.objects.filter(claim_token__in=tokens)
    if only is not None:
        claimed = claimed.filter(pk__in=only)
    return claimed.update(claim_token=None, claimed_until=None)


def renew(tokens: list[uuid.UUID], lease: float, only: list[Any] | None = None) -> int:
    """Extend every row still claimed with one of `tokens` (or only those whose ids are in
    `only`) to a lease of `lease` seconds from now: rows the tick still holds, a send of
    theirs running longer than the lease it claimed them for. Returns how many."""
    if not tokens or only == []:
        return 0
    claimed = Notification.objects.filter(claim_token__in=tokens)
    if only is not None:
        claimed = claimed.filter(pk__in=only)
    return claimed.update(claimed_until=lease_end(lease))


def release_held(key: str, now: datetime) -> int:
    """Make the rows held for target `key` due now (its circuit closed; one UPDATE over the
    held index). The tick asks for it when its write-back closed a circuit, or one did not open after all;
    an operator's close too."""
    return Notification.objects.filter(held_for=key).update(next_fire_at=now, held_for=None, updated_at=now)


def mark(token: uuid.UUID, now: datetime, limit: int, lease: float, *, queues: tuple[str, ...] = ()) -> int:
    """Set `token` on up to `limit` due rows, in claim order; return how many.

    One conditional UPDATE. PostgreSQL skips rows another tick is claiming (FOR UPDATE
    SKIP LOCKED). SQLite runs it under its database write lock, which the host site's
    own writes wait for: a plain UPDATE holds it for one step of the statement, while
    RETURNING would hold it until every returned row had been fetched (one step, and
    one wait for Python's GIL, per row).

    MariaDB and MySQL take no LIMIT in an IN subquery: there the selection (its branches
    FOR UPDATE SKIP LOCKED) runs first and the UPDATE names its ids, in one transaction,
    so the rows stay locked from the moment they are picked until their claim is written;
    the UPDATE asks again that they be claimable, so a row is never claimed twice even
    where a server took no lock inside the selection's derived tables.
    """
    lock = bool(connection.features.has_select_for_update_skip_locked)
    # One statement is atomic by itself (SQLite: no BEGIN/COMMIT); Django wants FOR UPDATE
    # inside a transaction.
    atomic: Any = transaction.atomic() if lock else contextlib.nullcontext()
    with atomic:
        if not connection.features.allow_sliced_subqueries_with_in:  # MariaDB/MySQL
            ids = selected_ids(now, limit, lock=lock, queues=queues)
            if not ids:
                return 0
            claimable = not_cancelled(Notification.objects.due(now, lease_clock=DatabaseNow()).filter(pk__in=ids))
            return claimable.update(claim_token=token, claimed_until=lease_end(lease))
        due = RawSQL(*selection(now, limit, lock=lock, queues=queues))  # noqa: S611 - the ORM's own SQL, values as parameters
        return Notification.objects.filter(pk__in=due).update(claim_token=token, claimed_until=lease_end(lease))


def lease_end(lease: float) -> Any:
    """The end of a claim made now, on the database's clock: `Now() + lease` (in UTC: `DatabaseNow`)."""
    return ExpressionWrapper(DatabaseNow() + Value(timedelta(seconds=lease)), output_field=DateTimeField())


def load_claimed(token: uuid.UUID, now: datetime) -> tuple[list[Notification], dict[Any, str]]:
    """The rows claimed with `token`, in claim order, and those the ORM cannot convert, by id
    (`load_defensively`).

    A claim loads a batch every few hundred milliseconds: its SELECT is compiled once per
    connection, each row converted by the fields' own converters and built without
    `Model.__init__`'s per-field work (as `Notification.from_db` would build it). Only when
    some row fails to convert does the ORM's `load_defensively` read the claim again.
    """
    try:
        rows = _loader().load(token)
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception:  # noqa: BLE001 - some row cannot be converted: `load_defensively` finds which
        rows = None
    if rows is None:
        return load_defensively(Notification.objects.filter(claim_token=token).order_by(*claim_order(now)))
    return in_claim_order(rows, now), {}


class _Loader:
    """The compiled SELECT of the rows of one claim token, and what converts its columns."""

    def __init__(self) -> None:
        probe = uuid.UUID(int=0)
        query = Notification.objects.filter(claim_token=probe)
        compiler = query.query.get_compiler(using=query.db)
        self.sql, params = compiler.as_sql()
        if len(params) != 1:  # the token, and nothing else, is a parameter
            raise ValueError("unexpected parameters in the claim's SELECT")
        self.alias = query.db
        self.token_field = Notification._meta.get_field("claim_token")
        columns = [column for column, _, _ in compiler.select]
        self.attnames = [column.target.attname for column in columns]
        if self.attnames != [f.attname for f in Notification._meta.concrete_fields]:
            raise ValueError("the claim's SELECT does not read every field in order")
        self.converters = [
            (index, ([_empty_json_at_once(c) for c in converters], expression))
            for index, (converters, expression) in compiler.get_converters(columns).items()
        ]
        self.timestamps = [
            index for index, f in enumerate(Notification._meta.concrete_fields) if isinstance(f, DateTimeField)
        ]

    def load(self, token: uuid.UUID) -> list[Notification] | None:
        """The rows claimed with `token`; None when one of them cannot be converted."""
        connection = connections[self.alias]
        converters = self.converters
        with connection.cursor() as cursor:
            # PostgreSQL: timestamps parsed by psycopg's C loader, given Django's tzinfo here.
            timestamp = compat.c_timestamptz(cursor, connection)
            cursor.execute(self.sql, [self.token_field.get_db_prep_value(token, connection)])
            fetched = cursor.fetchall()
        if timestamp is not None:
            given = ([lambda value, expression, connection: timestamp(value)], None)
            converters = [(index, given) for index in self.timestamps] + converters
        if signals.pre_init.has_listeners(Notification) or signals.post_init.has_listeners(Notification):
            return [
                Notification.from_db(self.alias, self.attnames, self.converted(v, connection, converters))
                for v in fetched
            ]
        rows = []
        for values in fetched:
            row = Notification.__new__(Notification)
            row._state = ModelState()
            row._state.adding = False
            row._state.db = self.alias
            row.__dict__.update(zip(self.attnames, self.converted(values, connection, converters), strict=True))
            rows.append(row)
        return rows

    def converted(self, fetched: Sequence[Any], connection: Any, converters: Sequence[Any]) -> list[Any]:
        values = list(fetched)
        for index, (converters_of, expression) in converters:
            value = values[index]
            if value is None:  # NULL: Django's converters (the app has none of its own) keep it
                continue
            for convert in converters_of:
                value = convert(value, expression, connection)
            values[index] = value
        return values


def _empty_json_at_once(convert: Any) -> Any:
    """A JSONField's converter that gives a row's many empty objects and lists ("{}", "[]")
    without the JSON decoder; any other converter as it is."""
    field = getattr(convert, "__self__", None)
    if not isinstance(field, JSONField) or field.decoder is not None:
        return convert
    if getattr(convert, "__func__", None) is not JSONField.from_db_value:
        return convert

    def decode(value: Any, expression: Any, connection: Any) -> Any:
        if value == "{}":
            return {}
        if value == "[]":
            return []
        return convert(value, expression, connection)

    return decode


_loaders: dict[str, _Loader] = {}


def _loader() -> _Loader:
    alias = router.db_for_read(Notification) or "default"
    found = _loaders.get(alias)
    if found is None:
        found = _loaders[alias] = _Loader()
    return found


def load_defensively(query: QuerySet[Notification]) -> tuple[list[Notification], dict[Any, str]]:
    """`list(query)`, except that rows the ORM cannot convert are returned apart, by id.

    One SELECT for the lot; only when it fails is each row read on its own (ids never
    fail to load), so a poisoned row costs one extra query per row beside it, once.
    Database outages are raised, not blamed on the rows.
    """
    try:
        return list(query), {}
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - some row cannot be converted: find which, below
        logger.warning("a row cannot be loaded (%s); loading row by row", type(exc).__name__)
    rows, unloadable = [], {}
    for pk in list(query.values_list("pk", flat=True)):
        try:
            with _savepoint():
                rows.append(query.get(pk=pk))
        except Notification.DoesNotExist:
            continue  # deleted meanwhile
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - this row's values cannot be loaded
            unloadable[pk] = f"{type(exc).__name__}: {exc}"[:LOAD_ERROR_SHOWN]
    return rows, unloadable


def _savepoint() -> Any:
    """Inside a transaction (a caller's, or a test's), a failed read must not abort it."""
    return transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
