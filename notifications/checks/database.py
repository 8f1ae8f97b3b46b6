"""The queue's database: SQLite's journal mode while ticks overlap (W004), MariaDB/MySQL's
connection options and server (E026, W007, W008, W009), the fast lane's listen line (W011)."""

from __future__ import annotations

import re
from typing import Any, cast

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import connections, router

from notifications.checks.scheduler import cron_interval
from notifications.conf import (
    LISTEN_URL_SCHEMES,
    app_settings,
    is_usable,
)

# How long a tick may outlive its budget: one channel deadline plus the engine's grace.
TICK_OVERRUN_GRACE = 1.0


WAL_PATTERN = re.compile(r"journal_mode\s*=\s*'?wal", re.IGNORECASE)


@checks.register()
def check_sqlite_concurrency(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """SQLite outside WAL mode makes overlapping ticks (and the admin) fail with "database is locked".

    More than one ticker is expected when a tick can run longer than the cron interval:
    a tick stops claiming after TICK_BUDGET but finishes what it holds, which can take
    one more CHANNEL_TIMEOUT, and cron starts the next one regardless.
    """
    from notifications.models import Notification

    alias = router.db_for_write(Notification) or "default"
    if alias not in settings.DATABASES or connections[alias].vendor != "sqlite":
        return []
    options = cast(dict[str, Any], settings.DATABASES[alias].get("OPTIONS") or {})
    if WAL_PATTERN.search(str(options.get("init_command", ""))):
        return []
    budget, timeout = app_settings.TICK_BUDGET, app_settings.CHANNEL_TIMEOUT
    if not (is_usable("TICK_BUDGET", budget, integer=False) and is_usable("CHANNEL_TIMEOUT", timeout, integer=False)):
        return []
    longest_tick = budget + timeout + TICK_OVERRUN_GRACE
    interval = cron_interval()
    if longest_tick < interval:
        return []
    return [
        checks.Warning(
            f"The queue's SQLite database ({alias!r}) is not in WAL mode, and a tick can run for up to "
            f"{longest_tick:g}s while a new one starts every {interval:g}s: overlapping ticks (and the admin) "
            "will wait on each other and fail with 'database is locked'.",
            hint=f'Add to DATABASES["{alias}"]["OPTIONS"]: '
            '{"init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE", "timeout": 30}; '
            "or lower NOTIFICATIONS_TICK_BUDGET; or use PostgreSQL.",
            id="notifications.W004",
        )
    ]


# The first servers with SELECT ... FOR UPDATE SKIP LOCKED, which claims need.
SKIP_LOCKED_SINCE = {"MariaDB": (10, 6), "MySQL": (8, 0, 11)}


STRONGER_THAN_READ_COMMITTED = ("repeatable read", "serializable")


THREE_BYTE_CHARSETS = ("utf8", "utf8mb3")


def _mysql_alias() -> str | None:
    """The queue's database alias when it is MariaDB/MySQL, else None."""
    from notifications.models import Notification

    alias = router.db_for_write(Notification) or "default"
    if alias not in settings.DATABASES or connections[alias].vendor != "mysql":
        return None
    return alias


@checks.register()
def check_mysql_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W007, W008: connection OPTIONS of a MariaDB/MySQL queue that cost correctness or speed."""
    alias = _mysql_alias()
    if alias is None:
        return []
    options = cast(dict[str, Any], settings.DATABASES[alias].get("OPTIONS") or {})
    return mysql_option_messages(alias, options)


def mysql_option_messages(alias: str, options: dict[str, Any]) -> list[checks.CheckMessage]:
    """What is wrong with these OPTIONS of a MariaDB/MySQL database (Django's defaults: READ
    COMMITTED and the 3-byte `utf8`)."""
    messages: list[checks.CheckMessage] = []
    isolation = str(options.get("isolation_level") or "read committed").lower()
    if isolation in STRONGER_THAN_READ_COMMITTED:
        messages.append(
            checks.Warning(
                f"The queue's MariaDB/MySQL database ({alias!r}) runs at {isolation.upper()}: a keyed "
                "schedule() that loses a race inside a transaction cannot see the row that won, and claims "
                "and writes lock ranges of the due index (gap locks), so concurrent ticks wait and deadlock.",
                hint=f'Remove "isolation_level" from DATABASES["{alias}"]["OPTIONS"] (Django\'s default) '
                'or set it to "read committed".',
                id="notifications.W007",
            )
        )
    charset = str(options.get("charset") or "utf8").lower()
    if charset in THREE_BYTE_CHARSETS:
        messages.append(
            checks.Warning(
                f"The queue's MariaDB/MySQL database ({alias!r}) is connected with the 3-byte {charset!r} "
                "character set: a subject, body or payload with an emoji or any character outside the Basic "
                "Multilingual Plane cannot be stored.",
                hint=f'Add "charset": "utf8mb4" to DATABASES["{alias}"]["OPTIONS"], and convert the tables '
                "(ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4).",
                id="notifications.W008",
            )
        )
    return messages


@checks.register(checks.Tags.database)
def check_mysql_server(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E026, W009: the MariaDB/MySQL server itself. Runs with `check --database` (and `migrate`)."""
    from django.db import DatabaseError

    alias = _mysql_alias()
    if alias is None or alias not in (databases or ()):
        return []
    connection = connections[alias]
    try:
        server = "MariaDB" if connection.mysql_is_mariadb else "MySQL"  # type: ignore[attr-defined]
        version = tuple(connection.mysql_version)  # type: ignore[attr-defined]
        engines = non_transactional_tables(alias)
    except DatabaseError:
        return []  # the server is down: Django's own checks say so
    return mysql_server_messages(alias, server, version, engines)


def non_transactional_tables(alias: str) -> dict[str, str]:
    """The app's tables on `alias` (MariaDB/MySQL) whose engine is not InnoDB: table -> engine."""
    tables = [model._meta.db_table for model in apps.get_app_config("notifications").get_models()]
    placeholders = ", ".join(["%s"] * len(tables))
    query = (
        "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN "
    )
    with connections[alias].cursor() as cursor:
        cursor.execute(f"{query} ({placeholders})", tables)
        return {name: engine for name, engine in cursor.fetchall() if engine and engine.lower() != "innodb"}


def mysql_server_messages(
    alias: str, server: str, version: tuple[int, ...], engines: dict[str, str]
) -> list[checks.CheckMessage]:
    """What is wrong with this MariaDB/MySQL server for the queue."""
    messages: list[checks.CheckMessage] = []
    since = SKIP_LOCKED_SINCE[server]
    if version < since:
        shown, needed = ".".join(map(str, version)), ".".join(map(str, since))
        messages.append(
            checks.Error(
                f"The queue's database ({alias!r}) is {server} {shown}, which has no SELECT ... FOR UPDATE "
                f"SKIP LOCKED: every tick fails at its claim.",
                hint=f"Upgrade to {server} {needed} or later (MariaDB 10.6+, MySQL 8.0.11+), or use PostgreSQL.",
                id="notifications.E026",
            )
        )
    if engines:
        listed = ", ".join(f"{table} ({engine})" for table, engine in sorted(engines.items()))
        messages.append(
            checks.Warning(
                f"Queue tables on {alias!r} are in a non-transactional engine: {listed}. Without transactions "
                "and row locks two ticks claim the same rows and a failed write-back is half applied.",
                hint="Convert them: ALTER TABLE <table> ENGINE=InnoDB; and set default_storage_engine=InnoDB "
                "on the server.",
                id="notifications.W009",
            )
        )
    return messages


@checks.register()
def check_listen_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """NOTIFICATIONS_LISTEN_DATABASE names a PostgreSQL alias of DATABASES or is a postgres:// URL.

    The value is never repeated: a URL may carry a password.
    """
    value = app_settings.LISTEN_DATABASE
    if value in ("", None):
        return []
    problem = ""
    if not isinstance(value, str):
        problem = "is not a string"
    elif value.strip().startswith(LISTEN_URL_SCHEMES):
        problem = _url_problem(value.strip())
    elif value.strip() not in settings.DATABASES:
        problem = "names no alias of DATABASES and is not a postgres:// URL"
    elif connections[value.strip()].vendor != "postgresql":
        problem = "names a DATABASES alias that is not PostgreSQL"
    if not problem:
        return []
    return [
        checks.Warning(
            f"NOTIFICATIONS_LISTEN_DATABASE {problem}: runtick --loop listens on the queue's own connection "
            "instead (its probe says whether that works).",
            hint="Name a DATABASES alias that connects straight to PostgreSQL (not through a pooler in "
            "transaction mode), or give a postgres://user@host:5432/dbname URL; see docs/databases.md.",
            id="notifications.W011",
        )
    ]


def _url_problem(url: str) -> str:
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return "is a URL, and listening needs psycopg 3 (psycopg2 has no LISTEN here)"
    try:
        conninfo_to_dict(url)
    except psycopg.Error:  # its message repeats the URL: not shown
        return "is a URL libpq cannot read"
    return ""
