"""Claiming due rows for one tick: one conditional UPDATE, fenced by a fresh token.

Two ticks running at once, on one host or many, on SQLite or PostgreSQL, never claim
the same row: PostgreSQL skips rows another tick is claiming (FOR UPDATE SKIP LOCKED)
and SQLite runs the single UPDATE under its database write lock. A claim lives for the
lease; a tick that dies leaves rows that become claimable again when it expires.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery

from .models import Notification


def due_query(now: datetime, limit: int) -> QuerySet:
    """The ids of the next `limit` claimable rows, oldest first (a range scan of the due index)."""
    return Notification.objects.due(now).order_by("next_fire_at", "id").values("pk")[:limit]


def claim(now: datetime, limit: int, lease: float) -> tuple[uuid.UUID, list[Notification]]:
    """Claim up to `limit` due rows, oldest first, for `lease` seconds.

    One conditional UPDATE sets a fresh token on the rows and returns them (UPDATE ...
    RETURNING, on PostgreSQL and SQLite 3.35+; elsewhere they are read back by token).
    PostgreSQL skips rows another tick is claiming (FOR UPDATE SKIP LOCKED); SQLite
    runs the single UPDATE under its database write lock.
    """
    token = uuid.uuid4()
    due = due_query(now, limit)
    atomic: Any = contextlib.nullcontext()  # one statement is atomic by itself (SQLite: no BEGIN/COMMIT)
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
        atomic = transaction.atomic()  # Django wants FOR UPDATE inside a transaction
    claiming = Notification.objects.filter(pk__in=due)
    values = {"claim_token": token, "claimed_until": now + timedelta(seconds=lease)}
    if connection.vendor in ("postgresql", "sqlite") and connection.features.can_return_columns_from_insert:
        with atomic:
            rows = _update_returning(claiming, values)
        rows.sort(key=lambda row: (row.next_fire_at, row.pk))
        return token, rows
    with atomic:
        claimed = claiming.update(**values)
    if not claimed:
        return token, []
    return token, list(Notification.objects.filter(claim_token=token).order_by("next_fire_at", "id"))


def _update_returning(queryset: QuerySet, values: dict[str, Any]) -> list[Notification]:
    """`queryset.update(**values)` that returns the updated rows, as one statement.

    The ORM compiles the UPDATE (so the due filter lives in one place, `due()`); the
    rows come back through a raw queryset, which applies the fields' converters.
    """
    query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
    query.add_update_values(values)
    sql, params = query.get_compiler(connection.alias).as_sql()
    fields = Notification._meta.concrete_fields
    returning = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    return list(Notification.objects.raw(f"{sql} RETURNING {returning}", params))
