"""Shared fixtures. The suite runs three times: SQLite (tests.settings), PostgreSQL
(tests.settings_postgres) and MariaDB/MySQL (tests.settings_mysql)."""

from __future__ import annotations

import os
import socket

import pytest
from django.conf import settings

# `--progress NAME`: make test's progress lines (tests/support/progress.py).
from tests.support.progress import pytest_addoption, pytest_configure  # noqa: F401

# The servers a pass of the suite needs: engine -> (name, CI's flag that forbids skipping).
SERVERS = {
    "django.db.backends.postgresql": ("PostgreSQL", "NOTIFICATIONS_REQUIRE_POSTGRES"),
    "django.db.backends.mysql": ("MariaDB", "NOTIFICATIONS_REQUIRE_MARIADB"),
}


def _engine() -> str:
    return settings.DATABASES["default"]["ENGINE"]


def _is_postgres() -> bool:
    return _engine() == "django.db.backends.postgresql"


def pytest_collection_modifyitems(config, items):
    """PostgreSQL and MariaDB runs need their server; without it, skip with a reason (never in CI)."""
    postgres = _is_postgres()
    skip_pg_only = pytest.mark.skip(reason="PostgreSQL-only: runs in the PostgreSQL pass (make test)")
    for item in items:
        if not postgres and "postgres_only" in item.keywords:
            item.add_marker(skip_pg_only)
    server = SERVERS.get(_engine())
    if server is None or _server_reachable():
        return
    name, required = server
    db = settings.DATABASES["default"]
    where = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT')}"
    if os.environ.get(required):
        raise pytest.UsageError(f"{name} at {where} is required ({required} is set, as in CI) but not reachable")
    skip_all = pytest.mark.skip(reason=f"{name} at {where} is not reachable on this machine")
    for item in items:
        item.add_marker(skip_all)


def _server_reachable() -> bool:
    db = settings.DATABASES["default"]
    default_port = 5432 if _is_postgres() else 3306
    try:
        with socket.create_connection((db.get("HOST") or "127.0.0.1", int(db.get("PORT") or default_port)), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def on_postgres() -> bool:
    return _is_postgres()


@pytest.fixture
def vendor() -> str:
    """The test database's `connection.vendor`: "sqlite", "postgresql" or "mysql"."""
    from django.db import connection

    return connection.vendor


@pytest.fixture
def smtp():
    """A real SMTP server on loopback (aiosmtpd), the site's mail sent to it; `.refuse(...)`
    shapes its answers per recipient."""
    from tests.support.mail_servers import SMTPServer

    server = SMTPServer()
    with server.settings(timeout=5):
        yield server
    server.close()


@pytest.fixture
def webhook_server():
    """A real HTTP server on loopback; set `.reply` or `.responder` to shape answers."""
    from tests.support.servers import WebhookServer

    server = WebhookServer()
    yield server
    server.close()


@pytest.fixture
def make_row(db):
    """Create a valid row through the public API, due now unless told otherwise."""
    from django.utils import timezone

    from notifications.api import schedule

    def make(**fields):
        fields.setdefault("channels", ["email"])
        if "email" in fields["channels"]:
            fields.setdefault("email_to", "ada@example.com")
            fields.setdefault("subject", "Reminder")
            fields.setdefault("body", "Hello")
        if "fire_at" not in fields and not fields.get("recurrence_rule"):
            fields["fire_at"] = timezone.now()
        return schedule(**fields)

    return make


@pytest.fixture
def children(transactional_db):
    """Starts `manage.py runtick` child processes against the test database; stops them after."""
    from tests.support.processes import Children

    started = Children()
    yield started
    started.close()


@pytest.fixture
def hostile():
    """Makes misbehaving local servers (tests/support/hostile_servers.py); closes them after."""
    from tests.support.hostile_servers import HostileServer

    servers: list[HostileServer] = []

    def make(behaviour: str = "ok", **options) -> HostileServer:
        server = HostileServer(behaviour, **options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()
