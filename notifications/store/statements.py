"""Statements several writers share: rows locked in one order (`lock_in_order`), and
multi-row INSERTs and per-row UPDATEs without the ORM's per-row compiling
(`insert_statements`, `update_rows`, each field's value prepared by `preparer`). The
tick's write-back uses them, and so do the operators' actions and the host API's inserts."""

from __future__ import annotations

import operator
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, F, Field, JSONField, Lookup, Model, UUIDField, signals
from django.db.models.base import ModelState
from django.db.models.lookups import In

from notifications import compat
from notifications.models import Notification

M = TypeVar("M", bound=Model)


def lock_in_order(pks: Iterable[Any]) -> set[Any] | None:
    """Lock the rows `pks` in primary-key order, in one statement (inside a transaction);
    returns those that exist (None on SQLite, which locks nothing row by row).

    Every writer of several rows takes their locks in this one order (the write-back here,
    `act` and `purge` in `notifications.services.actions`), so two of them never wait on each other in a
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
    locked = Notification.objects.filter(ids_in(ordered)).order_by("pk").select_for_update()
    return set(locked.values_list("pk", flat=True))


def ids_in(pks: Iterable[Any]) -> Lookup[Any]:
    """`pk__in=pks` as a condition for `filter()`: on PostgreSQL `pk = ANY(%s)`, the ids as one
    array parameter (see `IdsIn`)."""
    return IdsIn(F("pk"), list(pks))


class IdsIn(In):  # type: ignore[type-arg]  # generic in django-stubs only
    """`IN` of a list of integer ids; on PostgreSQL `= ANY(%s)` with the ids in one parameter,
    PostgreSQL's text form of an array.

    A write-back's lists of ids run to a thousand: as `IN (%s, %s, ...)` each id is prepared
    by its field, the text is thousands of placeholders long, and psycopg parses it anew for
    every statement (it caches only short ones) and fills in a literal per id. Anything but a
    list of plain ints is left to `IN` itself."""

    def get_prep_lookup(self) -> Any:
        if self.plain():
            return self.rhs
        return super().get_prep_lookup()

    def plain(self) -> bool:
        return isinstance(self.rhs, list) and all(type(pk) is int for pk in self.rhs)

    def as_postgresql(self, compiler: Any, connection: BaseDatabaseWrapper) -> tuple[str, Sequence[Any]]:
        if not self.plain():
            return self.as_sql(compiler, connection)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", (*lhs_params, "{" + ",".join(map(str, self.rhs)) + "}")


def insert_statements(model: type[Model], objs: Sequence[Model]) -> list[tuple[str, list[Any]]]:
    """Multi-row INSERTs of `objs`: bulk_create's result without its per-row SQL compiling.

    The delivery log gets a row per channel per firing; at thousands of rows a second,
    compiling bulk_create's multi-row VALUES dominated the write-back. One statement per
    chunk rather than an executemany: on SQLite the write lock is held across the
    statements, and each executemany row is a step that waits for Python's GIL again.
    Values go through each field's own database preparation, so every backend stores
    them as bulk_create would. For models without save() logic: no signals, no pre_save.
    PostgreSQL takes them all in one statement of an array per column (`_unnest_statement`).
    """
    fields = [f for f in compat.concrete_fields(model) if not f.primary_key]
    read = values_of(fields)
    # Only the values a driver does not take as they are go through a conversion.
    prepare = [(index, preparer(f)) for index, f in enumerate(fields) if f.get_internal_type() not in PLAIN_TYPES]
    if connection.vendor == "postgresql" and objs:
        return [_unnest_statement(model, fields, [_prepared(read(obj), prepare) for obj in objs])]
    per_statement = compat.insert_batch_size(connection, len(fields), len(objs))  # the database's parameter limit
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
        params: list[Any] = []
        for obj in chunk:
            params.extend(_prepared(read(obj), prepare))
        statements.append((sql, params))
    return statements


def _prepared(values: list[Any], prepare: Sequence[tuple[int, Callable[[Any], Any]]]) -> list[Any]:
    for index, prepared in prepare:
        values[index] = prepared(values[index])
    return values


def _unnest_statement(
    model: type[Model], fields: Sequence[Field[Any, Any]], rows: list[list[Any]]
) -> tuple[str, list[Any]]:
    """PostgreSQL: the rows as one INSERT ... SELECT FROM unnest() of an array per column.

    A multi-row VALUES of a write-back's thousand records is a text of tens of thousands
    of placeholders, which psycopg parses anew for every statement (it caches only short
    ones) and fills with a literal per value: most of the tick's own CPU on PostgreSQL.
    A parameter per column keeps the text short and cached. Each array is cast to its
    column's type without length or precision (an explicit cast to varchar(n) would cut
    a value short; the INSERT's own assignment refuses it, as VALUES does).
    """
    casts = [_ARRAY_MODIFIERS.sub("", str(f.db_type(connection))) for f in fields]
    # Only quoted model metadata and the columns' own types go into the text; values are parameters.
    sql = "INSERT INTO {} ({}) SELECT * FROM unnest({})".format(  # noqa: S608
        compat.quote_name(connection, model._meta.db_table),
        ", ".join(compat.quote_name(connection, f.column) for f in fields),
        ", ".join(f"%s::{cast}[]" for cast in casts),
    )
    return sql, [_array_text(column) for column in zip(*rows, strict=True)]


# A column type's length or precision, "(16)" of "varchar(16)".
_ARRAY_MODIFIERS = re.compile(r"\([^)]*\)")


def _array_text(values: Sequence[Any]) -> Any:
    """A column's values as PostgreSQL's text form of an array, one string parameter: every
    element double-quoted with its backslashes and double quotes escaped, NULL unquoted (the
    documented array syntax). psycopg's own dumping of a list costs four times as much. Values
    of any other type than these go to psycopg as the list they are."""
    elements = []
    for value in values:
        kind = type(value)
        if value is None:
            elements.append("NULL")
        elif kind is int:
            elements.append(str(value))
        elif kind is str or kind is uuid.UUID or kind is datetime:
            text = value.isoformat() if kind is datetime else str(value)
            if '"' in text or "\\" in text:
                text = text.replace("\\", "\\\\").replace('"', '\\"')
            elements.append(f'"{text}"')
        else:
            return list(values)
    return "{" + ",".join(elements) + "}"


def values_of(fields: Sequence[Field[Any, Any]]) -> Callable[[Model], list[Any]]:
    """What reads the values of `fields` off an instance, in one call, as a new list."""
    names = [f.attname for f in fields]
    if len(names) == 1:
        return lambda obj: [getattr(obj, names[0])]
    read = operator.attrgetter(*names)
    return lambda obj: list(read(obj))


def unsaved(model: type[M], values: dict[str, Any]) -> M:
    """An unsaved `model(**values)`, `values` naming every field but the primary key by its
    attribute name, built without `Model.__init__`'s per-field work (thousands a second in
    the write-back); `model(**values)` itself while anything listens to the init signals or
    `values` does not name exactly those fields."""
    names = _attnames.get(model)
    if names is None:
        names = _attnames[model] = frozenset(f.attname for f in compat.concrete_fields(model) if not f.primary_key)
    listened = signals.pre_init.has_listeners(model) or signals.post_init.has_listeners(model)
    if listened or values.keys() != names:
        return model(**values)
    obj = model.__new__(model)
    obj._state = ModelState()
    obj.__dict__.update(values)
    obj.pk = None
    return obj


_attnames: dict[type[Model], frozenset[str]] = {}


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
    prepare = [preparer(f) for f in fields]
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


def preparer(field: Field[Any, Any], using: BaseDatabaseWrapper | None = None) -> Callable[[Any], Any]:
    """The cheapest correct conversion of one field's Python value for the database
    (`using`'s; by default the default database's connection of the calling thread)."""
    db: Any = connection if using is None else using
    if field.get_internal_type() in PLAIN_TYPES:
        return lambda value: value
    if field.is_relation and compat.relation_target(field).get_internal_type() in ("AutoField", "BigAutoField"):
        return lambda value: value if type(value) is int else field.get_db_prep_save(value, db)
    if isinstance(field, UUIDField) and not compat.stores_uuid_natively(db):
        return lambda value: value.hex if isinstance(value, uuid.UUID) else field.get_db_prep_save(value, db)
    if isinstance(field, UUIDField):  # stored natively: a UUID goes as it is
        return lambda value: value if type(value) is uuid.UUID else field.get_db_prep_save(value, db)
    if isinstance(field, DateTimeField):
        adapt = compat.datetime_adapter(db)
        return lambda value: None if value is None else adapt(value)
    if isinstance(field, JSONField) and using is not None:
        return _json_preparer(field, using)
    return lambda value: field.get_db_prep_save(value, db)


def _json_preparer(field: JSONField[Any], using: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """A JSON field's conversion: what `get_db_prep_save` ends in for a plain value (the
    backend's `adapt_json_value`), without its four calls getting there; anything else (a
    lazy string, an expression) goes through `get_db_prep_save` itself."""
    adapt, encoder = compat.json_adapter(using), field.encoder

    def prepare(value: Any) -> Any:
        if value is None:  # SQL NULL, as get_db_prep_save stores it
            return None
        if type(value) in _PLAIN_JSON:
            return adapt(value, encoder)
        return field.get_db_prep_save(value, using)

    return prepare


# Values a JSON field's `get_prep_value` returns as they are.
_PLAIN_JSON = frozenset({dict, list, str, int, float, bool})


# Field types whose Python values (str, int, None) the database drivers take as they are.
PLAIN_TYPES = {
    "CharField",
    "TextField",
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "PositiveBigIntegerField",
}
