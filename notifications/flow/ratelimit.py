"""Rate limits per target, shared by every tick on every host through the database.

`NOTIFICATIONS_RATE_LIMITS = {"sms": "14/s,50000/d", "hooks.example.com": "600/m",
"*": "50/s"}`: each `N/<unit>` is a token bucket of capacity N refilled at N per unit,
stored as one `RateBucket` row. A burst of up to N goes at once and, over any span of
T units, at most N x (T + 1). `"*"` gives every webhook target not named its own
buckets of that size; a channel whose target is its own name (`email`, a site's `sms`) is
limited only when named.

A tick takes tokens for a whole batch in its own thread: one statement per bucket (an
upsert that refills, grants what it can and RETURNs the grant; two on MariaDB/MySQL,
which read the grant back), in a short transaction
with no network I/O. A target with several limits gets the smallest grant; the other
buckets are given back what they granted beyond it. Rows that got no token are not
sent now: they are deferred to the slot the binding bucket will have a token for them
(spending no retry), so rows to other targets behind them keep full speed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from notifications.channels import registry
from notifications.conf import app_settings
from notifications.flow.targets import ascii_host
from notifications.models import RateBucket

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
LIMIT_RE = re.compile(r"^\s*(\d+)\s*/\s*([smhd])\s*$")
ANY_WEBHOOK = "*"
SLOT_MARGIN = 0.002  # seconds
# How far ahead of a taker's clock a bucket's stamp may be and still count (seconds). Within
# it stamps never move back, so takers a little apart (a claim that waited for a lock, hosts
# slightly out of step) share one refill. A stamp further ahead was left by a clock running
# fast (an hour, say): it is set back to the taker's time, so it freezes the bucket for no
# longer than one take instead of until the correct clocks catch up.
STAMP_AHEAD = 30.0


@dataclass(frozen=True)
class Limit:
    """N per unit: a bucket of `count` tokens refilled over `period` seconds."""

    count: int
    unit: str

    @property
    def period(self) -> float:
        return UNITS[self.unit]

    @property
    def rate(self) -> float:
        """Tokens per second."""
        return self.count / self.period

    def __str__(self) -> str:
        return f"{self.count}/{self.unit}"


def parse(spec: str) -> tuple[Limit, ...]:
    """`"14/s,50000/d"` -> its limits; ValueError naming the part that is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{spec!r} is not a rate such as '50/s' or '14/s,50000/d'")
    limits = []
    for part in spec.split(","):
        match = LIMIT_RE.match(part)
        if not match or int(match.group(1)) < 1:
            raise ValueError(f"{part.strip()!r} is not N/s, N/m, N/h or N/d with N >= 1")
        limits.append(Limit(int(match.group(1)), match.group(2)))
    return tuple(limits)


def limit_errors(value: Any) -> list[str]:
    """What is wrong with a NOTIFICATIONS_RATE_LIMITS value; empty when it is usable."""
    if not isinstance(value, Mapping):
        return [f"must be a dict of target -> rate, not {type(value).__name__}"]
    errors = []
    for target, spec in value.items():
        if not isinstance(target, str) or not target or target != target.lower():
            names = ", ".join(map(repr, registry.names()))
            errors.append(f"target {target!r} must be a channel's name ({names}), '*' or a lowercased host[:port]")
            continue
        try:
            parse(spec)
        except ValueError as exc:
            errors.append(f"{target}: {exc}")
    return errors


def read_limits() -> dict[str, tuple[Limit, ...]]:
    """The site's limits, parsed; a value the checks reject (E020) means no limits."""
    value = app_settings.RATE_LIMITS
    if limit_errors(value):
        return {}
    return {_as_target(target): parse(spec) for target, spec in value.items()}


def _as_target(key: str) -> str:
    """A setting's key as `host_target` spells targets (`bücher.example` is its ASCII form)."""
    if key == ANY_WEBHOOK or registry.known(key) or key.startswith("["):  # an IPv6 literal is ASCII already
        return key
    host, colon, port = key.partition(":")
    return ascii_host(host) + colon + port


def limits_for(limits: Mapping[str, tuple[Limit, ...]], target: str) -> tuple[Limit, ...]:
    if target in limits:
        return limits[target]
    if not registry.known(target):  # a host: a channel named as its own target is limited only when named
        return limits.get(ANY_WEBHOOK, ())
    return ()


def bucket_key(target: str, limit: Limit) -> str:
    return f"{target} {limit}"


@dataclass(frozen=True)
class Grant:
    """Tokens granted for one target, and when the next one will be there (Unix seconds
    per further token: `next_at + i / rate` for the i-th row left over)."""

    granted: int
    next_at: float
    rate: float


def take(target: str, limits: tuple[Limit, ...], want: int, now: float | None = None) -> Grant:
    """Take up to `want` tokens from every bucket of `target` at once."""
    now = time.time() if now is None else now
    granted = want
    taken: list[tuple[Limit, int, float]] = []
    with transaction.atomic():
        for limit in limits:
            got, left = _take_one(bucket_key(target, limit), limit, granted, now)
            taken.append((limit, got, left))
            granted = min(granted, got)
        for limit, got, _ in taken:
            if got > granted:
                _give_back(bucket_key(target, limit), limit, got - granted)
    # The next row needs a token from every bucket: the one whose next whole token is furthest
    # off (the slowest, on a tie) says when it comes. A bucket asked only for what an earlier
    # one granted (none, when it was empty) may be full: it must not make that slot now.
    waits = [(_until_next(left + got - granted, limit), limit) for limit, got, left in taken]
    wait, binding = max(waits, key=lambda w: (w[0], -w[1].rate))
    # And a little (SLOT_MARGIN) so the token is there when the row comes.
    return Grant(granted, now + wait + SLOT_MARGIN, binding.rate)


def _until_next(left: float, limit: Limit) -> float:
    """Seconds until a bucket with `left` tokens has a whole one."""
    return max(0.0, 1.0 - max(left, 0.0)) / limit.rate


# --- the buckets' SQL: the one place it differs per database ----------------------------
#
# Refilled tokens at %(now)s: capped at the bucket's size, never back in time. Only the
# table name, the quoted `key` column and function names are formatted in; values are
# parameters.
_REFILLED = "{least}(%(cap)s, {table}.tokens + {greatest}(%(now)s - {table}.stamp, 0) * %(rate)s)"
# The stamp after a take: the later of the two, unless the stored one is implausibly ahead.
_STAMP = "CASE WHEN {table}.stamp > %(now)s + %(ahead)s THEN %(now)s ELSE {greatest}({table}.stamp, %(now)s) END"
_GRANT = "CAST({floor}({least}(%(want)s, " + _REFILLED + ")) AS {integer})"
_INSERT = "INSERT INTO {table} ({key}, tokens, stamp, granted) VALUES (%(key)s, %(first_left)s, %(now)s, %(first)s) "
# PostgreSQL and SQLite: one statement; every SET expression reads the row as it was.
_TAKE_RETURNING = (
    _INSERT + "ON CONFLICT ({key}) DO UPDATE SET "
    "tokens = " + _REFILLED + " - " + _GRANT + ", "
    "granted = " + _GRANT + ", "
    "stamp = " + _STAMP + " "
    "RETURNING granted, tokens"
)
# MariaDB/MySQL: ON DUPLICATE KEY UPDATE assigns left to right, each later expression
# reading the columns already assigned, so `granted` comes first (from the old tokens and
# stamp), `tokens` subtracts it, and `stamp` moves last. No RETURNING: the row is read back
# in the same transaction, under the lock the upsert took.
_TAKE_UPSERT = (
    _INSERT + "ON DUPLICATE KEY UPDATE "
    "granted = " + _GRANT + ", "
    "tokens = " + _REFILLED + " - {table}.granted, "
    "stamp = " + _STAMP
)
_READ_BACK = "SELECT granted, tokens FROM {table} WHERE {key} = %(key)s"
_GIVE_BACK = "UPDATE {table} SET tokens = {least}(%(cap)s, tokens + %(n)s) WHERE {key} = %(key)s"

_FUNCTIONS = {
    "postgresql": {"least": "LEAST", "greatest": "GREATEST", "floor": "FLOOR", "integer": "INTEGER"},
    "mysql": {"least": "LEAST", "greatest": "GREATEST", "floor": "FLOOR", "integer": "SIGNED"},
    "sqlite": {"least": "MIN", "greatest": "MAX", "floor": "", "integer": "INTEGER"},  # CAST truncates
}


def _sql(template: str) -> str:
    """`template` for the database at hand: its function names, table and quoted `key`."""
    names = _FUNCTIONS.get(connection.vendor, _FUNCTIONS["sqlite"])
    return template.format(**names, table=RateBucket._meta.db_table, key=connection.ops.quote_name("key"))


def _take_one(key: str, limit: Limit, want: int, now: float) -> tuple[int, float]:
    """One bucket: (tokens granted, tokens left). One upsert, which RETURNs the grant where
    the database can (MariaDB/MySQL: read back in the caller's transaction)."""
    first = min(want, limit.count)
    params: dict[str, str | int | float] = {
        "key": key,
        "cap": float(limit.count),
        "rate": limit.rate,
        "now": now,
        "want": want,
        "first": first,
        "first_left": float(limit.count - first),
        "ahead": STAMP_AHEAD,
    }
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(_sql(_TAKE_UPSERT), params)
            cursor.execute(_sql(_READ_BACK), {"key": key})
        else:
            cursor.execute(_sql(_TAKE_RETURNING), params)
        granted, left = cursor.fetchone()
    return int(granted), float(left)


def _give_back(key: str, limit: Limit, n: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_sql(_GIVE_BACK), {"key": key, "cap": float(limit.count), "n": n})
