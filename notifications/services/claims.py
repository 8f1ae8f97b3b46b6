"""Claiming due rows for one tick: one conditional UPDATE, fenced by a fresh token.

Two ticks running at once, on one host or many, on SQLite or PostgreSQL, never claim
the same row: PostgreSQL skips rows another tick is claiming (FOR UPDATE SKIP LOCKED)
and SQLite runs the single UPDATE under its database write lock. A claim lives for the
lease; a tick that dies leaves rows that become claimable again when it expires.

The claim only marks rows, and they are loaded afterwards: a row written by raw SQL
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
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, QuerySet, Value
from django.db.models.functions import Now

from notifications.models import Notification

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


def due_query(now: datetime, limit: int) -> QuerySet[Notification, Any]:
    """The ids of the next `limit` claimable rows, oldest first (a range scan of the due index).

    Due times are the tick's (`now`: tests and `run_tick(now=...)` pass their own), but
    leases are the database's: a claim is live until the database's clock passes it, so a
    host whose clock runs ahead never takes rows another tick is still sending."""
    return Notification.objects.due(now, lease_clock=Now()).order_by("next_fire_at", "id").values("pk")[:limit]


def claim(now: datetime, limit: int, lease: float) -> Claim:
    """Claim up to `limit` due rows, oldest first, for `lease` seconds, and load them."""
    token = uuid.uuid4()
    if not mark(token, now, limit, lease):
        return Claim(token)
    claimed = Notification.objects.filter(claim_token=token).order_by("next_fire_at", "id")
    rows, unloadable = load_defensively(claimed)
    return Claim(token, rows, unloadable)


def mark(token: uuid.UUID, now: datetime, limit: int, lease: float) -> int:
    """Set `token` on up to `limit` due rows, oldest first; return how many.

    One conditional UPDATE. PostgreSQL skips rows another tick is claiming (FOR UPDATE
    SKIP LOCKED). SQLite runs it under its database write lock, which the host site's
    own writes wait for: a plain UPDATE holds it for one step of the statement, while
    RETURNING would hold it until every returned row had been fetched (one step, and
    one wait for Python's GIL, per row).
    """
    due = due_query(now, limit)
    atomic: Any = contextlib.nullcontext()  # one statement is atomic by itself (SQLite: no BEGIN/COMMIT)
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
        atomic = transaction.atomic()  # Django wants FOR UPDATE inside a transaction
    with atomic:
        return Notification.objects.filter(pk__in=due).update(claim_token=token, claimed_until=lease_end(lease))


def lease_end(lease: float) -> Any:
    """The end of a claim made now, on the database's clock: `Now() + lease`."""
    return ExpressionWrapper(Now() + Value(timedelta(seconds=lease)), output_field=DateTimeField())


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
