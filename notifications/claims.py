"""Claiming due rows for one tick: one conditional UPDATE, fenced by a fresh token.

Two ticks running at once, on one host or many, on SQLite or PostgreSQL, never claim
the same row: PostgreSQL skips rows another tick is claiming (FOR UPDATE SKIP LOCKED)
and SQLite runs the single UPDATE under its database write lock. A claim lives for the
lease; a tick that dies leaves rows that become claimable again when it expires.

The claim takes ids only, and the rows are loaded afterwards: a row written by raw SQL
with a value the ORM cannot convert (a JSON integer of 5,000 digits, JSON nested 5,000
deep, `-infinity`, a malformed UUID, an impossible date) must cost only itself, never
the claim of the healthy rows beside it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery

from .models import Notification

logger = logging.getLogger("notifications.tick")

# Errors that mean the database itself is unwell, not one row: they end the tick
# (rows stay claimed until the lease runs out) instead of condemning healthy rows.
INFRASTRUCTURE_ERRORS = (OperationalError, InterfaceError)
LOAD_ERROR_SHOWN = 200  # characters of a conversion error kept in `last_error`


@dataclass
class Claim:
    """One claim: its token fences the write-back; `unloadable` rows could not be read."""

    token: uuid.UUID
    rows: list[Notification] = field(default_factory=list)
    unloadable: dict[Any, str] = field(default_factory=dict)  # pk -> why the ORM could not load it

    @property
    def size(self) -> int:
        return len(self.rows) + len(self.unloadable)


def due_query(now: datetime, limit: int) -> QuerySet:
    """The ids of the next `limit` claimable rows, oldest first (a range scan of the due index)."""
    return Notification.objects.due(now).order_by("next_fire_at", "id").values("pk")[:limit]


def claim(now: datetime, limit: int, lease: float) -> Claim:
    """Claim up to `limit` due rows, oldest first, for `lease` seconds, and load them."""
    token = uuid.uuid4()
    ids = claim_ids(token, now, limit, lease)
    if not ids:
        return Claim(token)
    return load(token, ids)


def claim_ids(token: uuid.UUID, now: datetime, limit: int, lease: float) -> list[Any]:
    """Set `token` on up to `limit` due rows; return their ids.

    One conditional UPDATE ... RETURNING id (PostgreSQL and SQLite 3.35+; elsewhere the
    ids are read back by token). PostgreSQL skips rows another tick is claiming (FOR
    UPDATE SKIP LOCKED); SQLite runs the single UPDATE under its database write lock.
    """
    due = due_query(now, limit)
    atomic: Any = contextlib.nullcontext()  # one statement is atomic by itself (SQLite: no BEGIN/COMMIT)
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
        atomic = transaction.atomic()  # Django wants FOR UPDATE inside a transaction
    claiming = Notification.objects.filter(pk__in=due)
    values = {"claim_token": token, "claimed_until": now + timedelta(seconds=lease)}
    if connection.vendor in ("postgresql", "sqlite") and connection.features.can_return_columns_from_insert:
        with atomic:
            return _update_returning_ids(claiming, values)
    with atomic:
        claimed = claiming.update(**values)
    if not claimed:
        return []
    return list(Notification.objects.filter(claim_token=token).values_list("pk", flat=True))


def load(token: uuid.UUID, ids: list[Any]) -> Claim:
    """The claimed rows, oldest first; rows the ORM cannot convert are set aside by id."""
    claimed = Notification.objects.filter(claim_token=token).order_by("next_fire_at", "id")
    rows, unloadable = load_defensively(claimed, ids)
    rows.sort(key=lambda row: (row.next_fire_at, row.pk))  # RETURNING gives no order
    return Claim(token, rows, unloadable)


def load_defensively(query: QuerySet, ids: list[Any]) -> tuple[list[Notification], dict[Any, str]]:
    """`list(query)`, except that rows the ORM cannot convert are returned apart, by id.

    `ids` are the rows `query` selects; in the fallback the rows come in their order.

    One SELECT for the lot; only when it fails is each of `ids` read on its own, so a
    poisoned row costs one extra query per row beside it, once. Database outages are
    raised, not blamed on the rows.
    """
    try:
        return list(query), {}
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - some row cannot be converted: find which, below
        logger.warning("a row cannot be loaded (%s); loading row by row", type(exc).__name__)
    rows, unloadable = [], {}
    for pk in ids:
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


def _update_returning_ids(queryset: QuerySet, values: dict[str, Any]) -> list[Any]:
    """`queryset.update(**values)` that returns the updated rows' ids, as one statement.

    The ORM compiles the UPDATE (so the due filter lives in one place, `due()`).
    """
    query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
    query.add_update_values(values)
    sql, params = query.get_compiler(connection.alias).as_sql()
    pk_column = connection.ops.quote_name(Notification._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {pk_column}", params)
        return [pk for (pk,) in cursor.fetchall()]
