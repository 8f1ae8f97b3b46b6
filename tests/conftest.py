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
    skip_other_pooled = pytest.mark.skip(reason="the PgBouncer copy runs for other parameters (multi_process's pooled)")
    for item in items:
        if not postgres and "postgres_only" in item.keywords:
            item.add_marker(skip_pg_only)
        if not _pooled_copy_wanted(item):
            item.add_marker(skip_other_pooled)
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


# --- PgBouncer: the PostgreSQL multi-process tests run a second time through it ------------


def pytest_generate_tests(metafunc):
    """On PostgreSQL, a test marked `multi_process` runs twice: its runtick children connected
    directly, and through a PgBouncer in transaction pooling (`db_route`).

    `multi_process(pooled=False)`: no PgBouncer copy, because another test's covers what its
    children do through the pooler. `multi_process(pooled={"ticks": 4})`: the copy for those
    parameters only (4 ticks racing through the pooler include what 2 would show).
    """
    marker = metafunc.definition.get_closest_marker("multi_process")
    if _is_postgres() and marker and marker.kwargs.get("pooled", True) is not False:
        metafunc.parametrize("db_route", ["direct", "pgbouncer"], indirect=True)


def _pooled_copy_wanted(item) -> bool:
    """False for the PgBouncer copy of parameters that `multi_process(pooled={...})` leaves out."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("db_route") != "pgbouncer":
        return True
    pooled = item.get_closest_marker("multi_process").kwargs.get("pooled", True)
    return pooled is True or all(callspec.params.get(name) == value for name, value in pooled.items())


@pytest.fixture(autouse=True)
def db_route(request):
    """How this test's runtick children reach PostgreSQL: "direct" (the default), or
    "pgbouncer" (`tests.support.processes.through` the session's PgBouncer)."""
    route = getattr(request, "param", "direct")
    if route == "direct":
        yield route
        return
    from django.db import connection

    from tests.support.processes import through

    bouncer = request.getfixturevalue("pgbouncer")
    with through(bouncer.database(connection.settings_dict)):
        yield route


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup, django_db_blocker):
    """A PgBouncer in transaction pooling in front of the test server, for the session.

    Skips with the reason when Debian's `pgbouncer` is not installed, except under
    NOTIFICATIONS_REQUIRE_POSTGRES (CI), where that fails. Set up after the test database
    and so stopped before it is dropped: its pooled server connections would hold it open.
    """
    from tests.support.pgbouncer import PgBouncer, binary

    if not _is_postgres():
        pytest.skip("PgBouncer sits in front of PostgreSQL: runs in the PostgreSQL pass")
    if binary() is None:
        why = "pgbouncer is not installed (Debian: apt-get install pgbouncer; make setup does it)"
        if os.environ.get("NOTIFICATIONS_REQUIRE_POSTGRES"):
            pytest.fail(f"{why}, and NOTIFICATIONS_REQUIRE_POSTGRES is set, as in CI")
        pytest.skip(why)
    db = settings.DATABASES["default"]
    bouncer = PgBouncer.start(db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432), db.get("USER") or "postgres")
    yield bouncer
    bouncer.close()


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
