"""Inserting validated rows: one (`insert_one`) or many in multi-row INSERTs (`insert_many`).

Rows reach here validated once, in Python (`creating.prepare`); the database enforces its
own constraints, and a violation of one comes back as a ValidationError naming the field
(`constraint_error`), without a query asking first. The key's unique constraint is the one
a valid row can still meet: `is_key_violation` tells it from the others by the error itself,
so a row cancelled between a refused insert and a look at it cannot make the refusal
unexplained (issue 34: that look used to re-raise the raw IntegrityError).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.db.models import Field, JSONField
from django.utils import timezone

from notifications import compat, databases
from notifications.models import Notification, address_keys, validation
from notifications.store.statements import preparer

# The key's unique constraint (`Notification.Meta.constraints`): PostgreSQL and MariaDB/MySQL
# name it in their errors; SQLite names the column it guards instead.
KEY_CONSTRAINT = "notification_key_unique"
# Errors that say "try the transaction again": MariaDB/MySQL's deadlock (1213) and
# PostgreSQL's deadlock and serialization failure (SQLSTATE 40P01, 40001).
MYSQL_DEADLOCK = 1213
RETRYABLE_SQLSTATES = ("40P01", "40001")


def alias() -> str:
    """The database the queue's rows are written to."""
    return router.db_for_write(Notification) or "default"


def insert_one(row: Notification) -> None:
    """INSERT `row` (validated already) and nothing else: no query first, no validation again.

    The statement `insert_many` builds, for one row: cheaper than `Model.save()`'s
    compiling, and like `bulk_create()` it sends no `pre_save`/`post_save` signal. A
    database constraint it violates is raised as a ValidationError naming the field.
    """
    try:
        insert_many([row])
    except IntegrityError as exc:
        raise constraint_error(exc) from exc


def insert_many(rows: Sequence[Notification]) -> None:
    """INSERT `rows` (validated already), as few statements as the database allows; each
    row gets its pk.

    On PostgreSQL one statement whatever the number of rows (more than one): one array
    parameter per column, `INSERT ... SELECT * FROM UNNEST(...)` (`_unnest_statement`), which psycopg
    adapts and the server parses far faster than a VALUES list of thousands of
    parameters. Elsewhere multi-row VALUES statements, as many as the parameter limit
    needs (one for a batch of a few thousand rows). Values are prepared by each field as
    bulk_create would, without bulk_create's per-value compiling. The new rows' ids come
    back with RETURNING where the database has it (PostgreSQL, SQLite 3.35+, MariaDB
    10.5+) and otherwise from one SELECT by their `firing_id`, new and unique to each row;
    either way matched by that id, so the order the database returns them in does not
    matter. A constraint's refusal is raised as the IntegrityError it is
    (`constraint_error` says which field): the caller decides what a taken key means.
    Rows naming a person are indexed (`models.address_keys`) in the same transaction; on
    PostgreSQL one such row goes in with its keys as one statement (`_insert_keyed_row`).
    """
    if not rows:
        return
    keys = [address_keys.keys_of(row) for row in rows]
    if not any(keys):  # one statement (or the caller's transaction) holds the rows
        _insert_rows(rows)
        return
    connection = connections[alias()]
    if len(rows) == 1 and connection.vendor == "postgresql":
        _insert_keyed_row(connection, rows[0], keys[0])
        return
    with transaction.atomic(using=connection.alias, savepoint=False):  # the rows and their keys together
        _insert_rows(rows)
        address_keys.add(rows, connection.alias, keys)


@dataclass(frozen=True)
class _Plan:
    """What every INSERT of the queue's rows on one connection shares: the columns, how
    each one's value is prepared, the statements' text. Built once per connection
    (`_plan`): building it cost as much as the rest of a one-row INSERT."""

    fields: list[Field[Any, Any]]
    prepare: list[Callable[[Any], Any]]
    table: str
    columns: str
    returned: str  # the columns RETURNING gives back: the id and the firing id
    keys: str  # PostgreSQL: the INSERT of a new row's address keys inside its own statement
    firing_prep: Callable[[Any], Any]
    # One row's statements by (which of its values are None, with its keys): see `one_row`.
    texts: dict[tuple[tuple[bool, ...], bool], str] = dataclasses.field(default_factory=dict)

    def values(self, row: Notification) -> list[Any]:
        """`row`'s parameters, column by column."""
        return [prepare(getattr(row, f.attname)) for f, prepare in zip(self.fields, self.prepare, strict=True)]

    def one_row(self, row: Notification, keys: set[str] | None = None) -> tuple[str, list[Any]]:
        """The INSERT of `row` alone and its parameters; with `keys` (PostgreSQL), one
        statement that inserts its address keys too and returns its id.

        Its None values go into the text as NULL (what the drivers send for None): a new
        row leaves most optional columns empty, and with about 36 parameters instead of
        58 psycopg parses the statement once (it caches statements of up to 50
        parameters and parsed a wider one again at every execute, a quarter of a
        schedule()'s CPU on PostgreSQL). The texts are kept per pattern of None values;
        a site's rows come in a few.
        """
        values = self.values(row)
        nulls = tuple(value is None for value in values)
        text = self.texts.get((nulls, keys is not None)) or self._text(nulls, keys is not None)
        params = [value for value in values if value is not None]
        return text, params if keys is None else [*params, address_keys.digests(keys)]

    def _text(self, nulls: tuple[bool, ...], keyed: bool) -> str:
        placeholders = ", ".join("NULL" if null else "%s" for null in nulls)
        # Only quoted model metadata goes into the text; values are parameters.
        text = f"INSERT INTO {self.table} ({self.columns}) VALUES ({placeholders})"  # noqa: S608
        if keyed:  # a data-modifying WITH runs exactly once, in the statement's own transaction
            returned = self.returned
            text = (
                f"WITH new_row AS ({text} RETURNING {returned}), keyed AS ({self.keys}) SELECT {returned} FROM new_row"  # noqa: S608
            )
        if len(self.texts) < MAX_ROW_TEXTS:
            self.texts[nulls, keyed] = text
        return text


# One row's statement texts a connection keeps (`_Plan.one_row`), one per pattern of None values.
MAX_ROW_TEXTS = 64
_PLANS: weakref.WeakKeyDictionary[Any, _Plan] = weakref.WeakKeyDictionary()


def _plan(connection: Any) -> _Plan:
    plan = _PLANS.get(connection)
    if plan is None:
        plan = _PLANS[connection] = _build_plan(connection)
    return plan


def _build_plan(connection: Any) -> _Plan:
    fields = _inserted_fields()
    quote = connection.ops.quote_name
    by_name = {f.name: f for f in compat.concrete_fields(Notification)}
    keys = ""
    if connection.vendor == "postgresql":
        keys = address_keys.insert_for_new_row(connection, "new_row", quote(str(by_name["id"].column)))
    return _Plan(
        fields=fields,
        prepare=[preparer(f, connection) for f in fields],
        table=quote(Notification._meta.db_table),
        columns=", ".join(quote(f.column) for f in fields),
        returned=", ".join(quote(str(by_name[name].column)) for name in ("id", "firing_id")),
        keys=keys,
        firing_prep=preparer(by_name["firing_id"], connection),
    )


def _insert_rows(rows: Sequence[Notification]) -> None:
    """`insert_many` without the rows' keys."""
    connection = connections[alias()]
    _stamp(rows)
    plan = _plan(connection)
    returning = compat.can_return_rows_from_bulk_insert(connection)
    ids: list[tuple[Any, Any]] = []
    with connection.cursor() as cursor:
        for sql, params in _statements(connection, plan, rows):
            if returning:
                sql += f" RETURNING {plan.returned}"
            cursor.execute(sql, params)
            if returning:
                ids.extend(cursor.fetchall())
    _take_ids(connection, plan, rows, ids if returning else None)


def _insert_keyed_row(connection: Any, row: Notification, keys: set[str]) -> None:
    """PostgreSQL: `row` and its address keys in one statement, which is atomic by itself:
    outside a transaction no BEGIN and COMMIT around two INSERTs, one round trip for all."""
    _stamp([row])
    plan = _plan(connection)
    with connection.cursor() as cursor:
        cursor.execute(*plan.one_row(row, keys))
        ids = cursor.fetchall()
    _take_ids(connection, plan, [row], ids)


def _take_ids(connection: Any, plan: _Plan, rows: Sequence[Notification], ids: list[tuple[Any, Any]] | None) -> None:
    """Give `rows` their ids: `ids` (id, firing id) as RETURNING gave them, or None to read them back."""
    by_firing = {_firing_key(plan.firing_prep(row.firing_id)): row for row in rows}
    if ids is None:
        ids = _ids_by_firing(list(by_firing), connection)
    for pk, firing in ids:
        row = by_firing[_firing_key(firing)]
        row.pk = pk
        row._state.adding = False
        row._state.db = connection.alias
    missing = [row for row in rows if row.pk is None]
    if missing:  # never expected: every row inserted has its id back
        raise DatabaseError(f"{len(missing)} inserted rows did not come back with an id")


def _stamp(rows: Sequence[Notification]) -> None:
    now = timezone.now()
    for row in rows:  # what pre_save gives auto_now_add / auto_now on an insert
        row.created_at = row.updated_at = now


def _inserted_fields() -> list[Field[Any, Any]]:
    return [f for f in compat.concrete_fields(Notification) if not f.primary_key]


def _statements(connection: Any, plan: _Plan, rows: Sequence[Notification]) -> Iterator[tuple[str, list[Any]]]:
    """(sql, params) of the INSERTs of `rows`, without RETURNING."""
    if len(rows) == 1:  # within every limit: one row always goes alone
        yield plan.one_row(rows[0])
        return
    if connection.vendor == "postgresql":  # one row: VALUES plans faster
        yield _unnest_statement(connection, plan, rows)
        return
    per_statement = compat.insert_batch_size(connection, len(plan.fields), len(rows))
    placeholders = "({})".format(", ".join(["%s"] * len(plan.fields)))
    values = [plan.values(row) for row in rows]
    # The parameter limit, and on MariaDB/MySQL the server's packet size.
    for chunk in databases.statement_chunks(connection, values, per_statement):
        count = chunk.stop - chunk.start
        # Only quoted model metadata goes into the text; values are parameters.
        sql = f"INSERT INTO {plan.table} ({plan.columns}) VALUES {', '.join([placeholders] * count)}"  # noqa: S608
        yield sql, [value for row in values[chunk] for value in row]


def _unnest_statement(connection: Any, plan: _Plan, rows: Sequence[Notification]) -> tuple[str, list[Any]]:
    """PostgreSQL's INSERT of every row in one statement: a column's values as one array.

    Text goes as `text[]` (the column's own length check then applies as it would to a
    VALUES row: a cast to `varchar(n)[]` would cut a long value instead), JSON as the
    text of each value (`text[]`, each element cast to jsonb; NULL stays SQL NULL, as
    bulk_create stores None), the rest as arrays of the column's own type.
    """
    arrays: list[str] = []
    selected: list[str] = []
    params: list[Any] = []
    for number, (field, prepare) in enumerate(zip(plan.fields, plan.prepare, strict=True)):
        values = [getattr(row, field.attname) for row in rows]
        element = f"c{number}"
        if isinstance(field, JSONField):
            dumps = functools.partial(json.dumps, cls=field.encoder)
            params.append([None if value is None else dumps(value) for value in values])
            arrays.append("%s::text[]")
            selected.append(f"{element}::jsonb")
            continue
        kind = str(field.db_type(connection))
        if kind.startswith("varchar") or field.get_internal_type() in ("CharField", "TextField"):
            kind = "text"
        params.append([prepare(value) for value in values])
        arrays.append(f"%s::{kind}[]")
        selected.append(element)
    names = ", ".join(f"c{number}" for number in range(len(plan.fields)))
    sql = (
        f"INSERT INTO {plan.table} ({plan.columns}) SELECT {', '.join(selected)} "  # noqa: S608 - model metadata only
        f"FROM UNNEST({', '.join(arrays)}) AS given({names})"
    )
    return sql, params


def fits_one_statement(rows: Sequence[Notification]) -> bool:
    """Whether `insert_many` inserts `rows` with one INSERT (and their ids come back with it)."""
    connection = connections[alias()]
    if connection.vendor == "postgresql":
        return True  # one UNNEST statement, whatever the number of rows
    fields = _inserted_fields()
    if not compat.can_return_rows_from_bulk_insert(connection) or compat.insert_batch_size(
        connection, len(fields), len(rows)
    ) < len(rows):
        return False
    if not databases.is_mysql(connection):
        return True
    _stamp(rows)  # MariaDB/MySQL: and within the server's packet, the rows as insert_many sends them
    values = [_plan(connection).values(row) for row in rows]
    return len(list(databases.statement_chunks(connection, values, len(rows)))) <= 1


def _firing_key(value: Any) -> str:
    """A firing id as text, however the driver returned it (UUID, 32 hex digits, bytes)."""
    return str(value).replace("-", "").lower()


def _ids_by_firing(firings: list[str], connection: Any) -> list[tuple[Any, Any]]:
    """(id, firing_id) of the rows whose firing ids are `firings`, read in chunks."""
    found: list[tuple[Any, Any]] = []
    step = compat.insert_batch_size(connection, 1, len(firings))
    for start in range(0, len(firings), step):
        chunk = firings[start : start + step]
        found.extend(
            Notification.objects.using(connection.alias)
            .filter(firing_id__in=chunk)
            .order_by()
            .values_list("id", "firing_id")
        )
    return found


def is_key_violation(exc: IntegrityError) -> bool:
    """Whether `exc` is the key's unique constraint refusing a row (and no other constraint)."""
    text = str(exc)
    return KEY_CONSTRAINT in text or text.rstrip().endswith(f"{Notification._meta.db_table}.key")


def is_retryable(exc: DatabaseError) -> bool:
    """Whether `exc` is a deadlock or serialization failure: the transaction may run again."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES:
        return True
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return len(args) > 0 and args[0] == MYSQL_DEADLOCK


def constraint_error(exc: IntegrityError) -> Exception:
    """A database constraint's refusal as a ValidationError naming the field (the key: on
    `key`; another column's check: on that field), or `exc` itself when no field is named."""
    if is_key_violation(exc):
        return ValidationError({"key": [ValidationError(validation.KEY_TAKEN, code="unique")]})
    text = str(exc)
    table = Notification._meta.db_table
    for field in compat.concrete_fields(Notification):
        column = str(field.column)
        # How PostgreSQL, SQLite and MariaDB/MySQL name a column's CHECK in their errors.
        if any(name in text for name in (f"{table}_{column}_check", f'"{column}" >= 0', f"{table}.{column}`")):
            return ValidationError({field.name: [f"The database refused this value ({text.splitlines()[0]})."]})
    return exc


@contextlib.contextmanager
def savepoint_if_needed() -> Iterator[None]:
    """A savepoint inside the caller's transaction, so a refused insert leaves it usable
    (PostgreSQL aborts a transaction at its first error); nothing outside one, where each
    statement commits by itself and a refusal costs nothing else."""
    if connections[alias()].in_atomic_block:
        with transaction.atomic(using=alias()):
            yield
    else:
        yield
