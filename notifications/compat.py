"""Every private or undocumented API of a library the app relies on, in one place.

One section per library: what the app relies on, the versions it was checked against,
and why the public API does not do. `tests/test_compat.py` checks each assumption
against the installed library and fails with a message naming the library, its version
and what changed, so an upgrade that breaks one fails loudly in CI (both tox
environments, Django 5.2 and 6.x, run it) rather than quietly in production: a guard
that no longer guards, a connection pool that leaks, a delivery log stored wrongly.

Stdlib and urllib3 imports only at module level: the address guard imports this module,
and requests and the ORM are only named in annotations.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from urllib3.connectionpool import port_by_scheme
from urllib3.util import connection as _urllib3_connection

if TYPE_CHECKING:
    import requests
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models import Field, Model


# === urllib3 ==========================================================================
#
# Relies on (checked with urllib3 2.8):
# - `HTTPConnection.connect()`, and `HTTPSConnection.connect()` before its TLS handshake,
#   take their socket from the private `self._new_conn()`.
# - A connection's `_dns_host` (private: the host to resolve as given, a trailing dot kept
#   where `host` drops it for TLS) beside `host`, `port`, `timeout`, `source_address`
#   and `socket_options`.
# - `PoolManager.pool_classes_by_scheme` (undocumented) picks the pool class per scheme;
#   the pool's `ConnectionCls` (documented) picks the connection class.
# - `urllib3.util.connection.allowed_gai_family()` (undocumented): the address family
#   urllib3 itself would resolve (IPv4 only when the host has no IPv6).
# - `PoolManager._merge_pool_kwargs()` (private) and `key_fn_by_scheme` (undocumented):
#   how `connection_from_host()` turns a host and pool settings into a pool's key and
#   the pool's arguments, for `connection_from_pool_key()` (documented).
#
# Why not the public API: urllib3 resolves and connects in one call
# (`util.connection.create_connection`), so there is no public place to check the
# resolved address before connecting to it. Checking the name first and letting urllib3
# resolve it again would leave a DNS-rebinding window; `_new_conn` is the one seam where
# a single resolution can be both checked and connected to.

allowed_gai_family: Callable[[], socket.AddressFamily] = _urllib3_connection.allowed_gai_family


class SocketFactory:
    """Mixin for urllib3 connection classes: `open_socket()` makes their socket.

    Put it before the urllib3 class in the bases. urllib3's `connect()` calls the
    private `_new_conn()`; this routes that call to `open_socket()`.
    """

    def _new_conn(self) -> socket.socket:
        return self.open_socket()

    def open_socket(self) -> socket.socket:
        """Resolve, connect and return the socket for this connection's host and port."""
        raise NotImplementedError(f"{type(self).__name__}.open_socket must return a connected socket")


def dns_host(connection: Any) -> str:
    """The host a urllib3 connection resolves: as given (`host` drops a trailing dot)."""
    return str(connection._dns_host)


def pool_key(
    pool_manager: Any, host_params: Mapping[str, Any], pool_kwargs: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The key and arguments of the pool `pool_manager.connection_from_host(**host_params,
    pool_kwargs=pool_kwargs)` hands out (its own steps, without the lookup)."""
    context: dict[str, Any] = pool_manager._merge_pool_kwargs(dict(pool_kwargs))
    context["scheme"] = host_params["scheme"] or "http"
    port = host_params["port"]
    context["port"] = port if port is not None else port_by_scheme.get(context["scheme"].lower(), 80)
    context["host"] = host_params["host"]
    return pool_manager.key_fn_by_scheme[context["scheme"].lower()](context), context


def set_pool_classes(pool_manager: Any, classes: Mapping[str, type]) -> None:
    """Make a urllib3 PoolManager build its per-host pools from `classes` (by scheme)."""
    pool_manager.pool_classes_by_scheme = dict(classes)


# === requests =========================================================================
#
# Relies on (checked with requests 2.34): `Response._content_consumed` (private).
# When it is True, `Response.close()` does not close `response.raw` (which would drop the
# connection instead of leaving it in the pool), and `.content` / `iter_content()` raise
# rather than read from `raw` again.
#
# Why not the public API: the webhook reads a response body by hand from `response.raw`,
# undecoded and only up to a cap (`iter_content()` decodes gzip, so a small compressed
# body could expand without bound before a cap on decoded bytes applied). After such a
# read, only this flag tells requests the body is done: then `close()` keeps the
# connection pooled for the worker's next request, and nothing can read from a connection
# that is already serving another request.


def mark_body_read(response: requests.Response) -> None:
    """Tell `response` that its body has been read to the end from `response.raw`."""
    response._content_consumed = True  # type: ignore[attr-defined]  # private: not in the stubs


# === Django: the ORM and the database backends ========================================
#
# Relies on (checked with Django 5.2), all undocumented but used throughout Django's own
# bulk_create:
# - `Model._meta.concrete_fields`: the fields that have a column, in declaration order.
# - `connection.ops.quote_name(name)`.
# - `connection.ops.adapt_datetimefield_value(value)`: what bulk_create stores for an
#   aware datetime (text in UTC on SQLite, the datetime itself on PostgreSQL).
# - `connection.ops.adapt_json_value(value, encoder)`: what `JSONField.get_db_prep_save`
#   ends in for a value that is not None, a lazy string or an expression (checked with
#   Django 5.2 and the main branch; `json.dumps` text, or psycopg's `Jsonb`).
# - `connection.features.has_native_uuid_field`: False where a UUID is stored as 32 hex
#   digits (SQLite), which `uuid.UUID.hex` gives directly.
# - `ForeignKey.target_field`: the field a relation points at.
# - `connection.features.max_query_params` and `can_return_rows_from_bulk_insert`
#   (`services.inserting`: the rows one INSERT of the queue may carry, and whether it
#   can return their ids); on SQLite the library's own limit, `Connection.getlimit()`.
#
# Why not the public API: the write-back logs a delivery record per channel per firing.
# `bulk_create` compiles its multi-row INSERT value by value through the SQL compiler,
# which dominated the write-back at thousands of rows a second, while SQLite holds the
# host site's write lock (`store.statements.insert_statements` builds the same statement itself,
# with values prepared as bulk_create would).
#
# Also relied on elsewhere, used in place and checked by the tests:
# - `connection.features.has_select_for_update_skip_locked` and `has_select_for_update`
#   (`notifications.store.claims`, `services.requeue`): which locking clauses the backend has.
#
# === Django: the template engine (`notifications.content.templating`, used in place) ==========
#
# The restricted template engine subclasses Django's template classes rather than
# calling them, so its reliances live there; checked with Django 5.2 by the tests:
# `Template.compile_nodelist()` (called by `Template.__init__`) and `Parser.extra_data`
# (Django 5.1+); `Parser.compile_filter`, `find_filter`, `invalid_block_tag` and
# `extend_nodelist(nodelist, node, token)`; `Variable._resolve_lookup(context)` (called
# by `Variable.resolve`); `ForNode`'s `sequence`, `nodelist_loop` and `nodelist_empty`;
# `Engine.get_template_builtins` and `get_template_libraries`.
# Why not the public API: Django's template language has no public way to restrict tags,
# filters and lookups, or to bound loops and output while rendering.

#
# === Django: CSRF (`notifications.inbox.web.cors`, used in place) ===========================
#
# `CsrfViewMiddleware._origin_verified(request) -> bool` (Django 4.0+): whether the
# request's `Origin` is the site's own or in CSRF_TRUSTED_ORIGINS; `process_view` calls it
# for an unsafe request that sends `Origin`, and refuses it when False. The inbox's JSON
# endpoints subclass the middleware and also trust NOTIFICATIONS_INBOX_ALLOWED_ORIGINS
# there, for those endpoints alone. Why not the public API: the trusted origins are one
# setting of the whole site; widening it would let the listed front ends post to every
# view. Checked with Django 5.2 by tests/test_compat.py.


def concrete_fields(model: type[Model]) -> list[Field[Any, Any]]:
    """The fields of `model` that have a column, in declaration order."""
    return list(model._meta.concrete_fields)


def quote_name(connection: BaseDatabaseWrapper, name: str) -> str:
    """`name` quoted as an identifier for `connection`'s database."""
    return connection.ops.quote_name(name)


def insert_batch_size(connection: BaseDatabaseWrapper, columns: int, rows: int) -> int:
    """How many rows of `columns` values one INSERT may carry on `connection` (at least 1).

    The database's own limit of parameters per statement: on SQLite the library's
    SQLITE_LIMIT_VARIABLE_NUMBER (32,766 since 3.32; Django 5.2 assumes 999, which would
    split a few dozen queue rows over several statements; Django 6.0 reads the limit
    too), elsewhere Django's `features.max_query_params` (None: no limit).
    """
    limit = connection.features.max_query_params
    if connection.vendor == "sqlite":
        import sqlite3

        connection.ensure_connection()
        raw = connection.connection
        getlimit = getattr(raw, "getlimit", None)  # Python 3.11+
        if getlimit is not None:
            # A placeholder is three bytes of the statement's text ("?, "): the text's own limit too.
            limit = min(getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER), getlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH) // 4)
    elif connection.vendor == "postgresql" and connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        limit = 65_535  # the protocol's parameters per statement
    if not limit:
        return max(rows, 1)
    return max(1, limit // max(columns, 1))


def can_return_rows_from_bulk_insert(connection: BaseDatabaseWrapper) -> bool:
    """Whether a multi-row INSERT on `connection` takes RETURNING (PostgreSQL, SQLite 3.35+,
    MariaDB 10.5+; not MySQL)."""
    return bool(connection.features.can_return_rows_from_bulk_insert)


def datetime_adapter(connection: BaseDatabaseWrapper) -> Callable[[datetime], Any]:
    """The function that turns an aware datetime into what `connection` stores for it."""
    return connection.ops.adapt_datetimefield_value


def json_adapter(connection: BaseDatabaseWrapper) -> Callable[[Any, Any], Any]:
    """The function that turns a plain JSON value and a field's encoder into what `connection` stores."""
    return connection.ops.adapt_json_value


def stores_uuid_natively(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection`'s database has a UUID type (else UUIDs are 32 hex digits)."""
    return bool(connection.features.has_native_uuid_field)


def relation_target(field: Field[Any, Any]) -> Field[Any, Any]:
    """The field a relation (a ForeignKey) points at."""
    return field.target_field  # type: ignore[attr-defined, no-any-return]  # ForeignKey only: not on Field


# === psycopg: its C loader of timestamptz (`store.claims`, the claim's loading) ==========
#
# Relies on (checked with psycopg 3.3 and Django 5.2): Django registers on each PostgreSQL
# connection a timestamptz loader of its own (`psycopg_any.BaseTzLoader`), a subclass of
# psycopg's pure-Python `TimestamptzLoader` that parses in the connection's time zone and
# then sets its `timezone` attribute as the tzinfo (UTC with USE_TZ, None without).
# psycopg's C extension (`psycopg._cmodule._psycopg`, with psycopg[binary] or psycopg[c])
# has the same loader in C; a cursor's own `adapters` may register it for that cursor alone.
# Why not the public API: Django's loader parses in Python, and a claim loads four
# timestamps a row: three quarters of the claim's SELECT in the tick's own thread.


def c_timestamptz(cursor: Any, connection: BaseDatabaseWrapper) -> Callable[[datetime], datetime] | None:
    """On PostgreSQL through psycopg's C extension, with Django's own timestamptz loader on
    the connection: `cursor` (Django's) reads timestamptz with psycopg's C loader from now
    on, and the function returned gives a value read so the tzinfo Django's loader gives it.
    None elsewhere: the cursor reads as Django reads."""
    if connection.vendor != "postgresql":
        return None
    try:
        import psycopg
        from django.db.backends.postgresql.psycopg_any import BaseTzLoader  # type: ignore[import-untyped]
        from psycopg import _cmodule
    except ImportError:  # psycopg2, or no PostgreSQL driver at all
        return None
    c_module = getattr(_cmodule, "_psycopg", None)
    adapters = getattr(getattr(cursor, "cursor", None), "adapters", None)
    if c_module is None or adapters is None:
        return None
    oid = psycopg.postgres.types["timestamptz"].oid
    django_loader = adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    if not (isinstance(django_loader, type) and issubclass(django_loader, BaseTzLoader)):
        return None  # a loader of the site's own: left alone
    tz = django_loader.timezone  # type: ignore[attr-defined]  # BaseTzLoader's, untyped
    adapters.register_loader(oid, c_module.TimestamptzLoader)
    return lambda value: value.replace(tzinfo=tz)


# === Django: email attachments that are MIME parts ====================================
#
# Relies on (checked with Django 5.2 and 6.1): `EmailMessage.attach()` takes a whole MIME
# part, an `email.mime.base.MIMEBase` before Django 6.0 and an `email.message.MIMEPart`
# from 6.0 on (where MIMEBase is deprecated), and sends it as it is.
# Why not the public API alone: a part is stored as its bytes (notifications.models.attachments)
# and has to come back as the class the installed Django wants.


def mime_part(data: bytes) -> Any:
    """A stored MIME part (its bytes, headers and all) as the part class Django's `attach()` takes."""
    import email
    import email.policy

    import django

    if django.VERSION >= (6, 0):
        from email.message import MIMEPart
        from email.parser import BytesParser

        return BytesParser(_class=MIMEPart, policy=email.policy.default).parsebytes(data)  # type: ignore[arg-type]  # any Message subclass
    from email import encoders
    from email.mime.base import MIMEBase

    parsed = email.message_from_bytes(data)
    part = MIMEBase(parsed.get_content_maintype(), parsed.get_content_subtype())
    for name in list(part.keys()):
        del part[name]
    for name, value in parsed.items():
        part[name] = value
    if str(parsed.get("Content-Transfer-Encoding", "")).lower() in ("8bit", "binary"):
        # Parsed back, 8-bit text is a str of escaped bytes that the legacy Message class
        # cannot write out again (UnicodeEncodeError on send): the same bytes, in base64.
        del part["Content-Transfer-Encoding"]
        part.set_payload(parsed.get_payload(decode=True))
        encoders.encode_base64(part)
    else:
        part.set_payload(parsed.get_payload())
    return part


# === glibc: large buffers given back to the system ======================================
#
# Relies on (checked with glibc 2.36): `mallopt(M_MMAP_THRESHOLD, n)` (M_MMAP_THRESHOLD is
# -3) makes every allocation of n bytes or more its own mmap, unmapped when freed, and turns
# off the threshold's dynamic growth (up to 32 MiB after the first large free).
# Why not the public API alone: Python has none. A message with a 10 MiB attachment holds
# about ten times that while it is built and written out (base64, its lines, the bytes);
# with the dynamic threshold those buffers land in per-thread arenas that keep them, so
# forty workers took 1 GB even while NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT let three
# sends hold attachments at once (bench/attachments_memory.py: 1,014 MiB; 291 MiB with it).
# Elsewhere (musl, macOS) it does nothing.

LARGE_ALLOCATION = 1024 * 1024  # bytes: buffers this large are mapped, and unmapped when freed
M_MMAP_THRESHOLD = -3
_large_buffers_mapped = False


def map_large_buffers() -> bool:
    """Ask glibc's allocator to give buffers of LARGE_ALLOCATION bytes or more back to the
    system when freed (once per process); whether it did."""
    global _large_buffers_mapped
    if _large_buffers_mapped:
        return True
    import ctypes
    import ctypes.util
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _large_buffers_mapped = bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_ALLOCATION))
    except (OSError, AttributeError):
        return False
    return _large_buffers_mapped


# --- Django: the error reports' mask of settings (checked against 5.2 and 6.0) ----------
# `SafeExceptionReporterFilter.hidden_settings` is the documented-by-source pattern of
# setting names (and keys of dict settings) that the DEBUG page and the error mails to
# ADMINS show as stars. An Apprise URL carries its service's credentials under the key
# `urls` of NOTIFICATIONS_CHANNELS[...]["OPTIONS"], which the pattern does not match; the
# public API (a subclass named in DEFAULT_EXCEPTION_REPORTER_FILTER) would be the site's
# to write, and a site that forgot it would show the credentials.
HIDDEN_OPTION_KEYS = ("URLS",)


def hide_setting_keys(filter_class: type, keys: Sequence[str]) -> None:
    """Widen `filter_class.hidden_settings` so a key spelled exactly as one of `keys` (any
    case) is masked too; the rest of the setting stays readable."""
    import re

    pattern = getattr(filter_class, "hidden_settings", None)
    if not isinstance(pattern, re.Pattern) or all(pattern.search(key) for key in keys):
        return
    exact = "|".join(f"^{re.escape(key)}$" for key in keys)
    filter_class.hidden_settings = re.compile(f"{pattern.pattern}|{exact}", pattern.flags | re.IGNORECASE)  # type: ignore[attr-defined]
