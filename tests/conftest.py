"""Shared fixtures. The suite runs twice: SQLite (tests.settings) and PostgreSQL."""

from __future__ import annotations

import os
import socket

import pytest
from django.conf import settings


def _is_postgres() -> bool:
    return settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


def pytest_collection_modifyitems(config, items):
    """PostgreSQL runs need the server; without it, skip with a reason (never in CI)."""
    postgres = _is_postgres()
    skip_pg_only = pytest.mark.skip(reason="PostgreSQL-only: runs in the PostgreSQL pass (make test)")
    for item in items:
        if not postgres and "postgres_only" in item.keywords:
            item.add_marker(skip_pg_only)
    if postgres and not _postgres_reachable():
        if os.environ.get("NOTIFICATIONS_REQUIRE_POSTGRES"):
            raise pytest.UsageError("PostgreSQL at 127.0.0.1:5432 is required (CI) but not reachable")
        skip_all = pytest.mark.skip(reason="PostgreSQL at 127.0.0.1:5432 is not reachable on this machine")
        for item in items:
            item.add_marker(skip_all)


def _postgres_reachable() -> bool:
    db = settings.DATABASES["default"]
    try:
        with socket.create_connection((db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def on_postgres() -> bool:
    return _is_postgres()


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
