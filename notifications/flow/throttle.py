"""Throttles per recipient and category, shared by every tick on every host through the database.

A category's `throttle` "N/d" lets at most N firings of it reach one recipient per window:
a window opens at the first firing counted and lasts the throttle's period; the firings
past N inside it are skipped (outcome `throttled`). One `ThrottleWindow` row per
recipient and category holds the window's start and count; a tick takes what a batch
wants in one upsert per key that grants what it can and RETURNs the grant (MariaDB/MySQL:
read back in the same transaction), as `notifications.flow.ratelimit` takes tokens.
"""

from __future__ import annotations

import hashlib
import threading
import time

from django.db import connection, transaction
from django.db.models import Case, F, Value, When

from notifications.databases import delete_sliced
from notifications.models import ThrottleWindow
from notifications.rules.categories import THROTTLE_UNITS, Throttle

# Windows older than the longest period are over whatever their category: a missing one
# starts afresh, so they go, a bounded batch at most once a minute per process that throttles.
STALE_AFTER = max(THROTTLE_UNITS.values())  # seconds
PRUNE_BATCH = 1000
PRUNE_INTERVAL = 60.0  # seconds
_pruned = {"at": float("-inf")}
_prune_lock = threading.Lock()

MAX_KEY_CHARS = ThrottleWindow._meta.get_field("key").max_length or 301


def throttle_key(category: str, recipient: str) -> str:
    """`<category> <recipient>`; a recipient too long for the column (an email address of
    254 characters) by its SHA-256."""
    key = f"{category} {recipient}"
    if len(key) <= MAX_KEY_CHARS:
        return key
    return f"{category} sha256:{hashlib.sha256(recipient.encode('utf-8', 'surrogatepass')).hexdigest()}"


# A window is over once its period has passed: the take opens a new one at %(now)s.
_OVER = "{table}.window_start + %(period)s <= %(now)s"
_GRANT = "CASE WHEN " + _OVER + " THEN %(first)s ELSE {least}(%(want)s, {greatest}(%(cap)s - {table}.{count}, 0)) END"
_INSERT = "INSERT INTO {table} ({key}, window_start, {count}, granted) VALUES (%(key)s, %(now)s, %(first)s, %(first)s) "
# PostgreSQL and SQLite: every SET expression reads the row as it was.
_TAKE_RETURNING = (
    _INSERT + "ON CONFLICT ({key}) DO UPDATE SET "
    "granted = " + _GRANT + ", "
    "{count} = CASE WHEN " + _OVER + " THEN %(first)s ELSE {table}.{count} + " + _GRANT + " END, "
    "window_start = CASE WHEN " + _OVER + " THEN %(now)s ELSE {table}.window_start END "
    "RETURNING granted"
)
# MariaDB/MySQL assign left to right, later expressions reading what is assigned: `granted`
# first (from the old window), `count` adds it, `window_start` moves last.
_TAKE_UPSERT = (
    _INSERT + "ON DUPLICATE KEY UPDATE "
    "granted = " + _GRANT + ", "
    "{count} = CASE WHEN " + _OVER + " THEN granted ELSE {table}.{count} + granted END, "
    "window_start = CASE WHEN " + _OVER + " THEN %(now)s ELSE {table}.window_start END"
)
_READ_BACK = "SELECT granted FROM {table} WHERE {key} = %(key)s"
_FUNCTIONS = {
    "postgresql": {"least": "LEAST", "greatest": "GREATEST"},
    "mysql": {"least": "LEAST", "greatest": "GREATEST"},
    "sqlite": {"least": "MIN", "greatest": "MAX"},
}


def _sql(template: str) -> str:
    names = _FUNCTIONS.get(connection.vendor, _FUNCTIONS["sqlite"])
    quote = connection.ops.quote_name
    return template.format(**names, table=quote(ThrottleWindow._meta.db_table), key=quote("key"), count=quote("count"))


def take(category: str, recipient: str, throttle: Throttle, want: int, now: float) -> int:
    """Count up to `want` firings of `category` to `recipient` at `now` (Unix seconds) in
    the current window; returns how many may go (the rest are throttled)."""
    if want <= 0:
        return 0
    key = throttle_key(category, recipient)
    params: dict[str, str | int | float] = {
        "key": key,
        "now": now,
        "period": float(throttle.period),
        "cap": throttle.count,
        "want": want,
        "first": min(want, throttle.count),
    }
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(_sql(_TAKE_UPSERT), params)
            cursor.execute(_sql(_READ_BACK), {"key": key})
        else:
            cursor.execute(_sql(_TAKE_RETURNING), params)
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def give_back(category: str, recipient: str, throttle: Throttle, n: int, now: float) -> int:
    """Uncount `n` firings `take` counted at `now` (Unix seconds) that did not go out after
    all (flow control deferred them): they are counted when they come back. Only in the
    window they were counted in; one UPDATE. How many windows changed (0 or 1)."""
    if n <= 0:
        return 0
    window = ThrottleWindow.objects.filter(
        key=throttle_key(category, recipient), window_start__lte=now, window_start__gt=now - throttle.period
    )
    # Not `count - n` below zero: the column is unsigned on MariaDB/MySQL.
    return window.update(count=Case(When(count__gt=n, then=F("count") - n), default=Value(0)))


def prune_stale(now: float) -> int:
    """Delete up to PRUNE_BATCH windows over for every throttle, at most once per
    PRUNE_INTERVAL in this process; how many went."""
    with _prune_lock:
        if time.monotonic() - _pruned["at"] < PRUNE_INTERVAL:
            return 0
        _pruned["at"] = time.monotonic()
    stale = ThrottleWindow.objects.filter(window_start__lt=now - STALE_AFTER).order_by("window_start")
    return delete_sliced(stale.values("pk")[:PRUNE_BATCH])
