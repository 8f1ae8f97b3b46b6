"""The fast lane of `runtick --loop` on PostgreSQL: a row made due now wakes a waiting loop.

Two halves, one channel (`CHANNEL`):

- `announce_due(when)`: every operation that makes a row due now or soon calls it once
  (`schedule()`, `requeue` ...). On PostgreSQL it sends `NOTIFY notifications_due`
  when the operation's transaction commits, so a loop never wakes for a row it cannot
  see yet and a rolled-back operation wakes nobody. On other databases it does nothing.
- `open_waiter(alias)`: what `runtick --loop` waits on between ticks. On PostgreSQL a
  `DueListener`, a connection of its own (Django's is closed between ticks) that has
  LISTENed on the channel: an announcement ends the wait at once, or at the announced
  due time. Elsewhere a `Poller`, and the loop ticks at its interval as before.

The listener proves itself once when it opens (`DueListener.probe`): a NOTIFY sent the
way announcements go (the queue's own connection) must come back on it within
`PROBE_TIMEOUT`. Behind PgBouncer in transaction pooling it does not (LISTEN stays on a
server connection the pooler hands to another client), so the loop gets a `Poller` at
`NOTIFICATIONS_LOOP_POLL_INTERVAL` that says why (`Poller.fast_lane_off`), and the tick
records keep saying it. `NOTIFICATIONS_LISTEN_DATABASE` gives the listener a direct line.

A notification is only a hint. The tick still claims what the due query finds, so a
lost one (no loop listening, the connection down) costs latency, never a delivery: the
row goes out at the loop's next interval, as it would on cron.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import secrets
import threading
import time
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from django.db import DatabaseError, connections, router, transaction
from django.utils import timezone

from notifications.conf import LISTEN_URL_SCHEMES, listen_database, loop_poll_interval
from notifications.models import Notification

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("notifications.services.wake")

# The NOTIFY channel; its payload is empty (due now) or the due time in Unix seconds.
CHANNEL = "notifications_due"
# Rows due later than this are not announced: a loop looks for them at its interval.
HORIZON = timedelta(minutes=5)
# The listener's `application_name`, so operators can tell it apart in pg_stat_activity.
LISTENER_NAME = "notifications wake listener"
# How often a waiting loop looks at its stop flag (seconds).
SLEEP_STEP = 0.1
# Seconds between attempts to (re)open the listener's connection: doubling up to the max.
RECONNECT_FIRST = 1.0
RECONNECT_MAX = 60.0
# Seconds a (re)connect may block the loop, stop requests included, while the server is
# unreachable; keepalives find a connection that died silently (a dropped NAT entry)
# within about 90 s instead of the system's default two hours.
CONNECT_TIMEOUT = 2
KEEPALIVES = {"keepalives_idle": 60, "keepalives_interval": 10, "keepalives_count": 3}
# Announced future due times a listener remembers; beyond that they wait for the interval.
MAX_PENDING = 1000
# Databases whose loops poll, by vendor, as `runtick --loop` names them (no server round trip).
POLLING_DATABASES = {"sqlite": "SQLite", "mysql": "MariaDB/MySQL"}
# A loop woken for a due time ticks this much after it (seconds), so the row is surely due.
DUE_GRACE = 0.01
# The probe at a loop's start: its own NOTIFY, on a channel of its own (no other loop wakes
# for it), must come back within this many seconds, or the fast lane counts as silent.
PROBE_CHANNEL = "notifications_probe"
PROBE_TIMEOUT = 1.0


def announce_due(when: datetime | None, *, using: str | None = None) -> None:
    """Tell waiting `runtick --loop` processes that a row is due at `when`.

    Call it once per operation that made rows due, with the earliest due time (a row's
    `next_fire_at` as saved; None, a parked row, announces nothing), from inside or
    outside its transaction: the NOTIFY goes out after the outermost transaction
    commits, and not at all if it rolls back. A due time past `HORIZON` is not
    announced. A no-op on databases other than PostgreSQL. Never raises: a
    notification that cannot be sent is logged, and the row waits for the interval.
    """
    if when is None:
        return
    alias = using or router.db_for_write(Notification)
    if connections[alias].vendor != "postgresql":
        return
    now = timezone.now()
    if when > now + HORIZON:
        return
    payload = "" if when <= now else f"{when.timestamp():.6f}"
    transaction.on_commit(partial(_notify, alias, payload), using=alias)


def _notify(alias: str, payload: str) -> None:
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])
    except DatabaseError as exc:
        logger.warning("could not wake runtick --loop (%s); the row goes at the next interval", exc)


# --- waiting --------------------------------------------------------------------------


class Waiter(Protocol):
    """What `runtick --loop` waits on between ticks."""

    def wait(self, deadline: float, stop: threading.Event, *, not_before: float = 0.0) -> bool:
        """Return at `deadline` (`time.monotonic()`), when `stop` is set, or earlier when a
        row comes due, though not before `not_before`. True when a due row ended it."""
        ...

    def close(self) -> None:
        """Release what the waiter holds."""
        ...


def open_waiter(alias: str | None = None) -> Waiter:
    """A `DueListener` on PostgreSQL with psycopg 3.2 or later whose probe came back (or
    could not be sent yet: the listener opens later), else a `Poller`."""
    alias = alias or router.db_for_write(Notification)
    connection = connections[alias]
    if connection.vendor != "postgresql":
        name = POLLING_DATABASES.get(connection.vendor, connection.vendor)
        return Poller(f"polls: {name} has no LISTEN/NOTIFY")
    if not _listen_supported():
        logger.warning("runtick --loop polls: waking on NOTIFY needs psycopg 3.2 or later")
        return Poller()
    listener = DueListener(alias, listen_target(alias))
    if not listener.connect() or listener.probe():
        return listener
    listener.close(unlisten=True)
    every = loop_poll_interval()
    silent = (
        f"its own NOTIFY did not come back within {PROBE_TIMEOUT:g}s on its LISTEN connection "
        f"({listener.where}; a pooler in transaction mode, such as PgBouncer?): it polls every {every:g}s. "
        "Give the listener a direct line: NOTIFICATIONS_LISTEN_DATABASE (docs/databases.md)"
    )
    return Poller(f"the fast lane is off: {silent}", every=every, fast_lane_off=silent)


def listen_target(alias: str) -> tuple[str, dict[str, Any]]:
    """Where a loop's LISTEN connection opens: how messages name it, and psycopg's keywords.

    NOTIFICATIONS_LISTEN_DATABASE's alias or URL (never named: a URL may carry a password),
    else the queue's own alias. A value that is neither (W011 says so) counts as unset.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    target = listen_database()
    if target.startswith(LISTEN_URL_SCHEMES):
        try:
            return "NOTIFICATIONS_LISTEN_DATABASE's URL", dict(conninfo_to_dict(target))
        except psycopg.Error:  # malformed (W011); psycopg's message repeats it, so it is not logged
            logger.warning("NOTIFICATIONS_LISTEN_DATABASE is a URL libpq cannot read: listening on %r", alias)
    elif target in connections.settings and connections[target].vendor == "postgresql":
        alias = target
    return f"database {alias!r}", connections[alias].get_connection_params()


def _listen_supported() -> bool:
    try:
        import psycopg
    except ImportError:  # psycopg2: Django supports it, the listener does not
        return False
    major, minor = (int(part) for part in psycopg.__version__.split(".")[:2])
    return (major, minor) >= (3, 2)


def _sleep_until(deadline: float, stop: threading.Event) -> None:
    """Sleep in steps until `deadline` (monotonic) or a stop request.

    Polls instead of `stop.wait()`: the signal handler sets `stop`, and a handler that
    runs while this thread holds the event's lock inside `wait()` would deadlock.
    """
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, SLEEP_STEP))


class Poller:
    """Waits out the interval: SQLite, MariaDB/MySQL, or any database without LISTEN/NOTIFY.

    `reason` says why the loop polls (for `runtick --loop` to say once at start); empty
    when there is nothing to say. On PostgreSQL with a silent fast lane, `every` is the
    shorter interval the loop ticks at instead, and `fast_lane_off` says why (kept on each
    tick's record for `notifications_status` and the admin).
    """

    def __init__(self, reason: str = "", *, every: float | None = None, fast_lane_off: str = "") -> None:
        self.reason = reason
        self.every = every
        self.fast_lane_off = fast_lane_off

    def wait(self, deadline: float, stop: threading.Event, *, not_before: float = 0.0) -> bool:
        _sleep_until(deadline, stop)
        return False

    def close(self) -> None:
        pass


class DueListener:
    """A dedicated connection LISTENing on `CHANNEL` for one `runtick --loop` process.

    Waits in slices of at most `SLEEP_STEP`, so a stop request ends a wait promptly. A
    lost connection is logged, the loop goes on polling, and the connection is opened
    again after a backoff (`RECONNECT_FIRST` doubling to `RECONNECT_MAX`); the first
    wait on a new connection ends at once (after `not_before`), for rows announced while
    nobody listened.
    """

    def __init__(self, alias: str, target: tuple[str, dict[str, Any]] | None = None) -> None:
        self.alias = alias  # the queue's: where announcements (and the probe) are sent
        self.where, self.params = target or (f"database {alias!r}", connections[alias].get_connection_params())
        self.conn: psycopg.Connection[Any] | None = None
        self.connected_at = 0.0
        self.retry_at = 0.0  # monotonic: when to try connecting again
        self.backoff = RECONNECT_FIRST
        self.due: list[float] = []  # heap of announced due times (monotonic) not yet served

    def connect(self) -> bool:
        """Open the connection and LISTEN; False (logged, retried later) when that fails."""
        import psycopg
        from psycopg import sql

        params = dict(self.params)
        for name, value in {"connect_timeout": CONNECT_TIMEOUT, **KEEPALIVES}.items():
            params.setdefault(name, value)  # the site's own OPTIONS win
        params.update(autocommit=True, application_name=LISTENER_NAME)
        try:
            conn = psycopg.connect(**params)
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            except BaseException:
                conn.close()
                raise
        except psycopg.Error as exc:
            self._schedule_retry(f"cannot LISTEN ({exc})")
            return False
        self.conn, self.connected_at = conn, time.monotonic()
        return True

    def probe(self) -> bool:
        """Whether a NOTIFY sent the way announcements go comes back on this connection
        within `PROBE_TIMEOUT`. True too when it cannot be sent (the database is down: the
        first tick says so, and a lost fast lane costs latency, never a row)."""
        import psycopg
        from psycopg import sql

        assert self.conn is not None
        token = secrets.token_hex(8)
        try:
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(PROBE_CHANNEL)))
            with connections[self.alias].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [PROBE_CHANNEL, token])
            came_back = self._await_probe(token, time.monotonic() + PROBE_TIMEOUT)
            self.conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(PROBE_CHANNEL)))
        except (psycopg.Error, DatabaseError) as exc:
            logger.warning("runtick --loop could not probe its fast lane (%s); listening anyway", exc)
            return True
        return came_back

    def _await_probe(self, token: str, deadline: float) -> bool:
        assert self.conn is not None
        while (left := deadline - time.monotonic()) > 0:
            for notify in self.conn.notifies(timeout=left, stop_after=1):
                if notify.channel == PROBE_CHANNEL and notify.payload == token:
                    return True
                if notify.channel == CHANNEL:  # a real announcement meanwhile: served as usual
                    self._remember(self._due_time(notify.payload))
        return False

    def wait(self, deadline: float, stop: threading.Event, *, not_before: float = 0.0) -> bool:
        woken = False
        while not stop.is_set():
            now = time.monotonic()
            target = deadline if not self.due else min(deadline, max(self.due[0], not_before))
            if now >= target:
                woken = target < deadline
                break
            step = min(target - now, SLEEP_STEP)
            if self.conn is None and now >= self.retry_at and self.connect():
                self._remember(now)  # rows announced while nobody listened: look at once
            elif self.conn is None:
                time.sleep(step)
            else:
                self._receive(step)
        self._flush()  # all that was announced by now is served by the tick about to start
        self._served(time.monotonic() + DUE_GRACE)
        return woken and not stop.is_set()

    def close(self, *, unlisten: bool = False) -> None:
        """Close the connection; `unlisten` first takes back its LISTEN: behind a pooler it
        stays on a server connection other clients get (which, reused last in first out,
        is most likely the one this statement runs on)."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                if unlisten:
                    self.conn.execute("UNLISTEN *")
                self.conn.close()
            self.conn = None

    def _flush(self) -> None:
        """Take every notification committed before now, including a burst still in transit.

        A round trip on the listening connection: the server sends the notifications it
        holds for us before the answer to a query, so after it nothing announced earlier
        can arrive late and wake the loop a second time for rows this tick claims. psycopg
        (3.2.4+) keeps those that arrive during the query for `notifies()`.
        """
        if self.conn is None:
            return
        import psycopg

        try:
            self.conn.execute("SELECT 1")
        except psycopg.Error as exc:
            self.close()
            self._schedule_retry(f"lost the LISTEN connection ({exc})")
            return
        self._receive(0, stop_after=None)

    def _receive(self, timeout: float, stop_after: int | None = 1) -> None:
        """Take the notifications arriving within `timeout` s (by default returning at the
        first one; `stop_after=None` takes every one that arrives in that time)."""
        if self.conn is None:
            return
        import psycopg

        try:
            for notify in self.conn.notifies(timeout=timeout, stop_after=stop_after):
                if notify.channel == CHANNEL:  # not another loop's probe
                    self._remember(self._due_time(notify.payload))
        except psycopg.Error as exc:
            self.close()
            self._schedule_retry(f"lost the LISTEN connection ({exc})")

    @staticmethod
    def _due_time(payload: str) -> float:
        """An announced due time on this process's monotonic clock (now when empty or unreadable)."""
        now = time.monotonic()
        try:
            at = float(payload) if payload else None
        except ValueError:
            at = None
        return now if at is None else now + max(at - time.time(), 0.0) + DUE_GRACE

    def _remember(self, due: float) -> None:
        if len(self.due) < MAX_PENDING:
            heapq.heappush(self.due, due)

    def _served(self, until: float) -> None:
        while self.due and self.due[0] <= until:
            heapq.heappop(self.due)

    def _schedule_retry(self, why: str) -> None:
        now = time.monotonic()
        if self.connected_at and now - self.connected_at >= RECONNECT_MAX:
            self.backoff = RECONNECT_FIRST  # it had been up a while: a fresh failure
        self.connected_at = 0.0
        self.retry_at = now + self.backoff
        logger.warning("runtick --loop %s; polling, next attempt in %gs", why, self.backoff)
        self.backoff = min(self.backoff * 2, RECONNECT_MAX)
