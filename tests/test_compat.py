"""Each private or undocumented library API in `notifications.compat`, checked directly.

These tests do not exercise the app: they check, against the installed library, the
exact assumption the app makes, and fail with the library's name, its version and what
changed. When one fails after an upgrade, read that library's section in
notifications/compat.py before changing anything else.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import socket
import uuid
from datetime import UTC, datetime
from unittest import mock

import pytest
import requests
import urllib3
from django.db import connection
from django.db.models import UUIDField
from django.template import Context, Engine, Template, defaulttags
from django.template.base import FilterExpression, Parser, Variable
from django.template.library import Library
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.poolmanager import PoolManager

from notifications import compat
from notifications.models import DeliveryAttempt, Notification
from notifications.store.statements import insert_statements


def changed(library: str, what: str) -> str:
    """The failure message: the library, its installed version, what no longer holds."""
    return f"{library} {importlib.metadata.version(library)}: {what} (see its section in notifications/compat.py)"


def parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


class Reached(Exception):
    """Raised by a stand-in to prove it was called."""


def reaches(call: object) -> bool:
    """Whether `call()` got as far as a stand-in that raises Reached."""
    try:
        call()  # type: ignore[operator]
    except Reached:
        return True
    except Exception:
        return False
    return False


def offline():
    """No name lookup or connection can leave the process inside the block."""
    return mock.patch.multiple(
        socket,
        getaddrinfo=mock.Mock(side_effect=AssertionError("resolved a name")),
        create_connection=mock.Mock(side_effect=AssertionError("connected")),
    )


# --- urllib3 -----------------------------------------------------------------------------


@pytest.mark.parametrize("connection_class", [HTTPConnection, HTTPSConnection])
def test_urllib3_connect_takes_its_socket_from_new_conn(connection_class):
    assert parameters(connection_class._new_conn) == ["self"], changed(
        "urllib3", f"{connection_class.__name__}._new_conn() no longer takes no arguments"
    )

    class Probe(compat.SocketFactory, connection_class):
        def open_socket(self):
            raise Reached

    # Offline: nothing may resolve or connect before _new_conn, where the guard checks the
    # one lookup. If this fails, the address guard no longer runs.
    with offline():
        reached = reaches(Probe("hooks.example.com", 443).connect)
    assert reached, changed(
        "urllib3", f"{connection_class.__name__}.connect() no longer starts by calling self._new_conn()"
    )


@pytest.mark.parametrize("host", ["hooks.example.com", "hooks.example.com.", "::1"])
def test_urllib3_connections_expose_the_host_to_resolve(host):
    conn = HTTPConnection(host, 8080, timeout=3, source_address=None, socket_options=[])
    assert compat.dns_host(conn) == host, changed(
        "urllib3", "HTTPConnection._dns_host no longer holds the host to resolve as given"
    )
    assert conn.host == host.rstrip("."), changed("urllib3", "HTTPConnection.host no longer drops a trailing dot")
    for name in ("host", "port", "timeout", "source_address", "socket_options", "sock"):
        assert hasattr(conn, name), changed("urllib3", f"HTTPConnection has no attribute {name!r}")
    assert (conn.port, conn.timeout) == (8080, 3), changed("urllib3", "HTTPConnection.port/.timeout changed meaning")


def test_urllib3_errors_take_the_arguments_the_transport_passes():
    conn = HTTPConnection("hooks.example.com", 80)
    try:
        NameResolutionError("hooks.example.com", conn, socket.gaierror(socket.EAI_NONAME, "no name"))
        NewConnectionError(conn, "Failed to establish a new connection: refused")
        ConnectTimeoutError(conn, "Connection to hooks.example.com timed out.")
    except TypeError as exc:
        pytest.fail(changed("urllib3", f"an exception's constructor changed: {exc}"))


def test_urllib3_pool_manager_builds_pools_from_pool_classes_by_scheme():
    class MarkedPool(urllib3.HTTPConnectionPool):
        pass

    manager = PoolManager()
    compat.set_pool_classes(manager, {"http": MarkedPool, "https": urllib3.HTTPSConnectionPool})
    pool = manager.connection_from_host("hooks.example.com", 80, scheme="http")
    assert isinstance(pool, MarkedPool), changed(
        "urllib3", "PoolManager no longer builds its pools from pool_classes_by_scheme"
    )
    assert hasattr(MarkedPool, "ConnectionCls"), changed("urllib3", "HTTPConnectionPool.ConnectionCls is gone")


def test_urllib3_allowed_gai_family_names_an_address_family():
    assert compat.allowed_gai_family() in (socket.AF_INET, socket.AF_INET6, socket.AF_UNSPEC), changed(
        "urllib3", "urllib3.util.connection.allowed_gai_family() no longer returns an address family"
    )


# --- requests ----------------------------------------------------------------------------


def response_over(raw: mock.Mock) -> requests.Response:
    response = requests.Response()
    response.raw = raw
    response.status_code = 200
    return response


def test_requests_response_has_the_consumed_flag():
    assert requests.Response()._content_consumed is False, changed(
        "requests", "Response._content_consumed no longer starts False"
    )


def test_requests_close_keeps_the_connection_of_a_body_marked_read():
    raw = mock.Mock(spec=["read", "close", "release_conn"])
    response = response_over(raw)
    compat.mark_body_read(response)
    response.close()
    assert not raw.close.called, changed(
        "requests", "Response.close() closes raw although _content_consumed is True: pooled connections get dropped"
    )
    assert raw.release_conn.called, changed("requests", "Response.close() no longer calls raw.release_conn()")


def test_requests_close_closes_the_connection_of_a_body_not_read():
    """The other half: without the flag, close() drops the connection (so the flag matters)."""
    raw = mock.Mock(spec=["read", "close", "release_conn"])
    response_over(raw).close()
    assert raw.close.called, changed("requests", "Response.close() no longer closes raw for an unread body")


def test_requests_never_reads_a_body_marked_read_again():
    """After the webhook drained `raw` by hand, nothing may read from a connection back in the pool."""
    raw = mock.Mock(spec=["read", "close", "release_conn", "stream"])
    response = response_over(raw)
    compat.mark_body_read(response)
    with pytest.raises(requests.exceptions.StreamConsumedError):
        next(response.iter_content(1024))
    with pytest.raises(RuntimeError):
        _ = response.content
    assert not raw.read.called and not raw.stream.called, changed(
        "requests", "iter_content()/content read from raw although _content_consumed is True"
    )


# --- Django: ORM and database backends ---------------------------------------------------


def test_django_concrete_fields_are_the_fields_with_a_column():
    with_columns = [f.name for f in DeliveryAttempt._meta.get_fields() if getattr(f, "column", None)]
    assert [f.name for f in compat.concrete_fields(DeliveryAttempt)] == with_columns, changed(
        "Django", "Options.concrete_fields is no longer the fields with a column, in declaration order"
    )


def test_django_quote_name_quotes_an_identifier():
    quoted = compat.quote_name(connection, "attempted_at")
    assert quoted != "attempted_at" and "attempted_at" in quoted, changed(
        "Django", f"connection.ops.quote_name() returned {quoted!r}"
    )


def test_django_datetime_adapter_stores_what_bulk_create_stores():
    field = DeliveryAttempt._meta.get_field("attempted_at")
    value = datetime(2025, 3, 30, 1, 30, 15, 123456, tzinfo=UTC)
    assert compat.datetime_adapter(connection)(value) == field.get_db_prep_save(value, connection), changed(
        "Django", "connection.ops.adapt_datetimefield_value() differs from DateTimeField.get_db_prep_save()"
    )


def test_django_uuid_storage_is_what_the_shortcut_assumes():
    value = uuid.uuid4()
    prepared = UUIDField().get_db_prep_save(value, connection)
    if compat.stores_uuid_natively(connection):
        assert prepared == value, changed("Django", "a native UUIDField no longer stores the UUID itself")
    else:
        assert prepared == value.hex, changed(
            "Django", "without has_native_uuid_field, a UUIDField is no longer stored as 32 hex digits"
        )


def test_django_foreign_key_target_field_is_the_related_primary_key():
    fk = DeliveryAttempt._meta.get_field("notification")
    target = compat.relation_target(fk)
    assert target is Notification._meta.pk, changed("Django", "ForeignKey.target_field is not the related pk")
    assert target.get_internal_type() in ("AutoField", "BigAutoField")
    assert fk.get_db_prep_save(7, connection) == 7, changed("Django", "a ForeignKey no longer stores an int as is")


def test_django_locking_features_are_flags():
    for name in ("has_select_for_update", "has_select_for_update_skip_locked", "has_native_uuid_field"):
        assert isinstance(getattr(connection.features, name, None), bool), changed(
            "Django", f"connection.features.{name} is gone or not a bool"
        )


@pytest.mark.django_db
def test_django_insert_statements_store_what_bulk_create_stores(make_row):
    """The sum of the reliances above: a row written by insert_statements reads back as bulk_create's."""
    row = make_row()
    when = datetime(2025, 3, 30, 1, 30, 15, 123456, tzinfo=UTC)
    firing = uuid.uuid4()

    def attempt(channel: str) -> DeliveryAttempt:
        return DeliveryAttempt(
            notification_id=row.pk,
            firing_id=firing,
            channel=channel,
            outcome=DeliveryAttempt.AttemptOutcome.FAILED,
            error="webhook: HTTP 503",
            error_class="transient",
            http_status=None if channel == "email" else 503,
            duration_ms=12,
            attempted_at=when,
        )

    DeliveryAttempt.objects.bulk_create([attempt("email")])
    with connection.cursor() as cursor:
        for sql, params in insert_statements(DeliveryAttempt, [attempt("webhook")]):
            cursor.execute(sql, params)
    fields = [f.name for f in compat.concrete_fields(DeliveryAttempt) if not f.primary_key and f.name != "channel"]
    by_bulk_create, by_insert = (
        DeliveryAttempt.objects.filter(channel=channel).values(*fields).get() for channel in ("email", "webhook")
    )
    by_insert["http_status"] = by_bulk_create["http_status"]  # differs on purpose
    assert by_insert == by_bulk_create, changed("Django", "insert_statements() no longer stores what bulk_create does")


# --- psycopg: its C loader of timestamptz (store.claims) --------------------------------------------


@pytest.mark.django_db
def test_psycopg_c_timestamptz_reads_what_django_reads(make_row, vendor):
    """A timestamp read with psycopg's C loader, given Django's tzinfo, is the ORM's own value."""
    when = datetime(2025, 3, 30, 1, 30, 15, 123456, tzinfo=UTC)
    row = make_row()
    Notification.objects.filter(pk=row.pk).update(next_fire_at=when)
    with connection.cursor() as cursor:
        given = compat.c_timestamptz(cursor, connection)
        if vendor != "postgresql":
            assert given is None
            return
        assert given is not None, changed("psycopg", "no C loader of timestamptz, or Django's loader changed")
        table = compat.quote_name(connection, Notification._meta.db_table)
        cursor.execute(f"SELECT next_fire_at, created_at FROM {table} WHERE id = %s", [row.pk])
        read = [given(value) for value in cursor.fetchone()]
    by_orm = list(Notification.objects.values_list("next_fire_at", "created_at").get(pk=row.pk))
    assert read == by_orm, changed("psycopg", "its C timestamptz loader reads another instant")
    assert [v.tzinfo for v in read] == [v.tzinfo for v in by_orm], changed("Django", "BaseTzLoader.timezone")
    with connection.cursor() as cursor:  # another cursor reads as Django reads
        assert compat.c_timestamptz(cursor, connection) is not None


# --- Django: the template engine (notifications.content.templating) ------------------------------


def test_django_template_init_compiles_through_compile_nodelist():
    class Probe(Template):
        def compile_nodelist(self):
            raise Reached

    # If this fails, the restricted parser is bypassed: every Django tag and lookup would work.
    assert reaches(lambda: Probe("{{ a }}", engine=Engine())), changed(
        "Django", "Template() no longer parses its source through compile_nodelist()"
    )


def test_django_parser_records_extra_data_since_5_1():
    import django

    parser = Parser([], {}, {}, None)
    parser.parse()
    if django.VERSION >= (5, 1):
        assert isinstance(getattr(parser, "extra_data", None), dict), changed(
            "Django", "Parser.extra_data (copied onto the Template) is gone"
        )


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("compile_filter", ["self", "token"]),
        ("find_filter", ["self", "filter_name"]),
        ("invalid_block_tag", ["self", "token", "command", "parse_until"]),
        ("extend_nodelist", ["self", "nodelist", "node", "token"]),
    ],
)
def test_django_parser_hooks_keep_their_signatures(method, expected):
    assert parameters(getattr(Parser, method)) == expected, changed(
        "Django", f"Parser.{method}{inspect.signature(getattr(Parser, method))} changed its parameters"
    )


def test_django_variable_resolve_goes_through_resolve_lookup():
    class Probe(Variable):
        def _resolve_lookup(self, context):
            return "looked up here"

    # If this fails, payload-only lookups are bypassed: templates could call methods.
    assert Probe("a.b").resolve(Context({"a": {"b": "django's own"}})) == "looked up here", changed(
        "Django", "Variable.resolve() no longer calls Variable._resolve_lookup()"
    )


def test_django_filter_expressions_and_filters_keep_their_shape():
    library = Library()
    library.filter("shout", lambda value: str(value).upper())
    parser = Parser([], {}, [library], None)
    expression = FilterExpression("a.b|shout", parser)
    assert isinstance(expression.var, Variable), changed("Django", "FilterExpression.var is no longer a Variable")
    [(func, args)] = expression.filters
    assert args == [] and getattr(func, "_filter_name", None) == "shout", changed(
        "Django", "FilterExpression.filters is no longer [(func, args)] with func._filter_name"
    )


def test_django_for_node_keeps_the_parts_the_bounded_loop_reads():
    nodes = Engine().from_string("{% for x, y in pairs reversed %}{{ x }}{% empty %}none{% endfor %}").nodelist
    [node] = [n for n in nodes if isinstance(n, defaulttags.ForNode)]
    copy = defaulttags.ForNode(node.loopvars, node.sequence, node.is_reversed, node.nodelist_loop, node.nodelist_empty)
    assert (copy.loopvars, copy.is_reversed) == (["x", "y"], True), changed(
        "Django", "ForNode(loopvars, sequence, is_reversed, nodelist_loop, nodelist_empty) changed"
    )
    assert isinstance(copy.sequence, FilterExpression), changed("Django", "ForNode.sequence is no FilterExpression")


def test_django_engine_builds_its_libraries_through_the_overridden_getters():
    calls = []

    class Probe(Engine):
        def get_template_builtins(self, builtins):
            calls.append("builtins")
            return []

        def get_template_libraries(self, libraries):
            calls.append("libraries")
            return {}

    Probe(loaders=[], libraries={}, builtins=[])
    assert sorted(calls) == ["builtins", "libraries"], changed(
        "Django", "Engine.__init__ no longer calls get_template_builtins()/get_template_libraries()"
    )


def test_django_csrf_middleware_asks_origin_verified_for_an_unsafe_request():
    from django.http import HttpRequest
    from django.middleware.csrf import CsrfViewMiddleware

    assert parameters(CsrfViewMiddleware._origin_verified) == ["self", "request"], changed(
        "django", "CsrfViewMiddleware._origin_verified(request) changed"
    )
    asked = []

    class Probe(CsrfViewMiddleware):
        def _origin_verified(self, request):
            asked.append(request.META["HTTP_ORIGIN"])
            return False

    request = HttpRequest()
    request.method = "POST"
    request.META.update(HTTP_ORIGIN="https://elsewhere.example", SERVER_NAME="testserver", SERVER_PORT="80")
    refused = Probe(lambda r: None).process_view(request, lambda r: None, (), {})
    assert asked == ["https://elsewhere.example"] and refused.status_code == 403, changed(
        "django", "CsrfViewMiddleware.process_view no longer refuses through _origin_verified"
    )
