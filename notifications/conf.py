"""The app's settings: `NOTIFICATIONS_<NAME>` read at access time, defaults in one table.

Two views of the same settings:

- `app_settings.TICK_LIMIT` is the raw value, read at each access, so
  `override_settings` works in tests and nothing is read at import time.
  `notifications.checks` validates these raw values through `manage.py check`.
- `TickSettings.read()` is a typed, frozen snapshot that a tick takes once and hands to
  the parts it creates (channels, transport, write-back policy). A value the checks
  would report falls back to its default here, so a misconfigured site keeps running
  on defaults (and `manage.py check` says what is wrong) instead of crashing mid-tick.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings as django_settings

from notifications.rules import categories as category_rules
from notifications.rules import origins as origin_rules
from notifications.rules import public_url as public_url_rules
from notifications.rules import quiet
from notifications.rules.network import IPNetwork


class Defaults:
    """Defaults for every `NOTIFICATIONS_<NAME>` setting (docs/settings.md has the table)."""

    TICK_LIMIT: int = 100  # rows claimed per batch
    MAX_RETRIES: int = 3  # attempts of one firing before it is dead-lettered
    BACKOFF: tuple[int, ...] = (60, 300, 1800)  # seconds before retry 1, 2, 3 ...
    CHANNEL_TIMEOUT: float = 10  # total deadline of one channel send, in seconds
    TICK_BUDGET: float = 50  # seconds after which a tick stops claiming batches
    LEASE: float | None = None  # claim lifetime; None derives it from budget and timeout
    # Rows delivered at once (threads, started as claimed rows need them). Real receivers
    # answer in 100-500 ms, so sends in flight, not CPU, bound a burst: see
    # docs/performance.md for what this costs (memory per send) and gives.
    CONCURRENCY: int = 256
    # Sends in flight to one target (a webhook host, or email) at most: a burst to one
    # receiver never opens more connections to it than this.
    TARGET_CONCURRENCY: int = 16
    WEBHOOK_SECRET: str | list[str] = ""
    WEBHOOK_ALLOWED_NETWORKS: list[str] = []
    RESPONSE_BODY_LIMIT: int = 64 * 1024  # bytes of a webhook response ever read
    ATTEMPT_RETENTION_DAYS: int = 30
    # Days an inbox message is kept (read or not); the tick's housekeeping deletes older ones.
    INBOX_RETENTION_DAYS: int = 90
    # Bytes of a payload's compact JSON (as the webhook sends it): each claimed row is held
    # in memory by the tick and the change page, so one oversized row costs every tick.
    MAX_PAYLOAD_BYTES: int = 64 * 1024
    # Seconds a host's clock may differ from the database's before it is reported:
    # due times are read on each host's own clock (leases on the database's; see notifications.health.clock).
    MAX_CLOCK_OFFSET: float = 5
    # "HH:MM-HH:MM" in each row's own time zone: nothing is sent inside (blank: no window).
    # A row's own `quiet_hours` overrides it ("off": none for that row).
    QUIET_HOURS: str = ""
    # Per target: open the circuit after `failures` consecutive failed deliveries (0: off),
    # hold its rows `cooldown` seconds, doubled after each failed probe up to `max_cooldown`.
    CIRCUIT_BREAKER: dict[str, float] = {"failures": 10, "cooldown": 60, "max_cooldown": 3600}
    # Per target ("email", a webhook host, "*" for every other webhook host): "N/s,N/d" ...
    RATE_LIMITS: dict[str, str] = {}
    # Where the tick sends email (see notifications.channels.email.mailers): a dotted backend path (None: the
    # site's EMAIL_BACKEND, or Django's SMTP backend while that is the queue's own), or on
    # Django 6.1+ a MAILERS alias; NOTIFICATIONS_MAILERS gives aliases (a row's `mailer`)
    # to sites before MAILERS, in its shape: {"alias": {"BACKEND": ..., "OPTIONS": {...}}}.
    EMAIL_BACKEND: str | None = None
    MAILER: str = ""
    MAILERS: dict[str, dict[str, Any]] = {}
    # Attachments: bytes of one row's attachments together, and the STORAGES alias they are kept in.
    MAX_ATTACHMENT_BYTES: int = 10 * 1024 * 1024
    ATTACHMENT_STORAGE: str = "default"
    # Attachment bytes the tick's workers hold at once in a process (notifications.channels.email.inflight).
    ATTACHMENT_BYTES_IN_FLIGHT: int = 32 * 1024 * 1024
    # Seconds a `low` row may wait past its due time before it is claimed as `normal`:
    # low-priority mail is never starved by a steady stream of normal mail.
    LOW_PRIORITY_AGING: float = 3600
    # Bearer token a Prometheus scraper sends to `notifications.metrics.view` (blank: staff
    # users only). See docs/operations.md.
    METRICS_TOKEN: str = ""
    # The site's own channels beside email and webhook (notifications.channels.registry):
    # {"sms": {"BACKEND": "dotted.path.Class", "OPTIONS": {...}}}.
    CHANNELS: dict[str, dict[str, Any]] = {}
    # Kinds of notification a recipient may choose (notifications.rules.categories):
    # {"news": {"label": "Product news", "default": "on", "throttle": "3/d"}}.
    CATEGORIES: dict[str, dict[str, Any]] = {}
    # The site's public origin (https://example.com): the links in email (one-click
    # unsubscribe, the preference centre) are built on it, since a tick has no request.
    PUBLIC_URL: str = ""
    # An address that unsubscribes by mail (List-Unsubscribe's mailto: alternative); blank: none.
    UNSUBSCRIBE_MAILTO: str = ""
    # Rows one digest holds at most: once this many have joined, it goes out at once
    # (notifications.store.digests).
    DIGEST_MAX_ITEMS: int = 50
    # The signed-in user's inbox (notifications.inbox.web): a dotted path to
    # f(request) -> str | None naming the request's recipient (None: `user:{pk}` for a
    # signed-in user), how often the badge asks for the counts, and the https:// origins of
    # front ends on other sites allowed to call the endpoints with credentials.
    INBOX_RECIPIENT: str | None = None
    INBOX_POLL_SECONDS: float = 30
    INBOX_ALLOWED_ORIGINS: list[str] = []
    # The HTTP API (notifications.http_api): rows one batch may hold, bytes one request body may hold.
    API_MAX_BATCH: int = 1000
    API_MAX_BODY: int = 1024 * 1024
    # Requests one API token may make, as NOTIFICATIONS_RATE_LIMITS spells a rate ("20/s,10000/d");
    # shared by every host through the database. Blank: no limit.
    API_RATE_LIMIT: str = ""
    # `runtick --loop` on PostgreSQL (notifications.services.wake): the DATABASES alias, or a
    # postgres:// URL, its LISTEN connection opens on instead of the queue's own (blank: the
    # queue's), for a site whose queries go through a pooler in transaction mode; and how
    # often a loop whose fast lane is silent (its own NOTIFY did not come back) ticks.
    LISTEN_DATABASE: str = ""
    LOOP_POLL_INTERVAL: float = 2
    # Seconds an `Idempotency-Key` stays "in progress" (409) for a request that never
    # answers (its process killed, its connection lost): after it, a repeat takes the key over.
    API_IDEMPOTENCY_LEASE: float = 60


# A derived lease outlives everything a tick does with its rows: the budget, a last batch
# started just before it ends (one deadline), a channel that overran its deadline and was
# reported by the monitor (another), and this margin for the write-back, a slow database
# and clock drift between hosts.
LEASE_MARGIN = 60.0  # seconds

# The longest delay from now any setting or row may ask for: a hundred years, which every
# datetime the queue computes (now plus a delay, now minus a retention) and every database
# column it ends in can hold. A row's `backoff` may share it.
MAX_DELAY_SECONDS = 100 * 365 * 86_400

# Upper bounds of numeric settings, in each setting's own unit (BACKOFF: each step), and the
# unit as messages name it. A value above its bound is reported by the setting's check id as
# any other invalid value is, and the tick reads the default instead: a larger one would
# overflow the datetime arithmetic or the database column it ends in (or hold a worker for
# longer than a tick can wait).
MAXIMUMS: dict[str, tuple[float, str]] = {
    "TICK_LIMIT": (1_000_000, "rows, as runtick --limit"),
    "CHANNEL_TIMEOUT": (3_600, "seconds: an hour"),
    "TICK_BUDGET": (86_400, "seconds: a day, as runtick --budget"),
    "LEASE": (7 * 86_400, "seconds: a week"),
    "BACKOFF": (MAX_DELAY_SECONDS, "seconds: a hundred years"),
    "ATTEMPT_RETENTION_DAYS": (MAX_DELAY_SECONDS // 86_400, "days: a hundred years"),
    "INBOX_RETENTION_DAYS": (MAX_DELAY_SECONDS // 86_400, "days: a hundred years"),
    "MAX_CLOCK_OFFSET": (MAX_DELAY_SECONDS, "seconds: a hundred years"),
    "LOW_PRIORITY_AGING": (MAX_DELAY_SECONDS, "seconds: a hundred years"),
    "DIGEST_MAX_ITEMS": (10_000, "rows"),
    "INBOX_POLL_SECONDS": (86_400, "seconds: a day"),
    "LOOP_POLL_INTERVAL": (3_600, "seconds: an hour"),
    "API_IDEMPOTENCY_LEASE": (86_400, "seconds: a day, as long as a key is kept"),
}


class Settings:
    """Attribute access to the app's raw settings, e.g. `app_settings.TICK_LIMIT`."""

    prefix = "NOTIFICATIONS_"

    def __getattr__(self, name: str) -> Any:
        if not hasattr(Defaults, name):
            raise AttributeError(name)
        return getattr(django_settings, self.prefix + name, getattr(Defaults, name))

    @property
    def webhook_secrets(self) -> list[str]:
        """The site's signing secrets, newest first; a single string is one key.

        Raises TypeError when the setting is neither a string nor a list of strings
        (`manage.py check` reports it as notifications.E009).
        """
        secrets = parse_secrets(self.WEBHOOK_SECRET)
        if secrets is None:
            raise TypeError("NOTIFICATIONS_WEBHOOK_SECRET must be a string or a list of strings")
        return list(secrets)


app_settings = Settings()


# --- typed readers: the value when usable, else the default ------------------------------


def is_positive(value: Any, *, integer: bool) -> bool:
    """A positive int (or, unless `integer`, a positive finite int or float); bools are not
    numbers, and infinity is not a number of seconds a tick can plan with."""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    # An int is always finite; math.isfinite() would raise OverflowError past 1e308.
    return bool(value > 0) and (isinstance(value, int) or math.isfinite(value))


def maximum(name: str) -> float:
    """The largest value `NOTIFICATIONS_<name>` may take (see MAXIMUMS); infinity if unbounded."""
    bound = MAXIMUMS.get(name)
    return math.inf if bound is None else bound[0]


def is_usable(name: str, value: Any, *, integer: bool) -> bool:
    """`value` is positive (see `is_positive`) and within the bound of `NOTIFICATIONS_<name>`."""
    return is_positive(value, integer=integer) and value <= maximum(name)


def derived_lease(budget: float, timeout: float) -> float:
    """The lease when NOTIFICATIONS_LEASE is unset: see LEASE_MARGIN."""
    return budget + 2 * timeout + LEASE_MARGIN


def lease_too_short(lease: float, budget: float, timeout: float) -> str | None:
    """Why a claim of `lease` seconds could expire while a tick of `budget` still delivers
    its rows (a second tick would send them again), or None (notifications.E008)."""
    if lease > budget + timeout:
        return None
    return f"a lease of {lease:g}s is not longer than the budget plus the channel timeout ({budget + timeout:g}s)"


def positive_int(name: str) -> int:
    """`NOTIFICATIONS_<name>` if it is a positive integer, else its default."""
    value = getattr(app_settings, name)
    return value if is_usable(name, value, integer=True) else int(getattr(Defaults, name))


def positive_number(name: str) -> float:
    """`NOTIFICATIONS_<name>` as a float if it is a positive number within its bound, else its default."""
    value = getattr(app_settings, name)
    return float(value if is_usable(name, value, integer=False) else getattr(Defaults, name))


def is_backoff(value: Any) -> bool:
    """A non-empty list of positive seconds: what `manage.py check` (E006) and a row's own
    `backoff` must be."""
    return isinstance(value, (list, tuple)) and bool(value) and all(is_positive(s, integer=False) for s in value)


def parse_backoff(value: Any) -> tuple[float, ...] | None:
    """A non-empty list of seconds as floats; None if unusable.

    Zero steps are usable (retry at once; tests rely on it) although `manage.py check`
    asks for positive ones (E006).
    """
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if not all(not isinstance(s, bool) and isinstance(s, (int, float)) and s >= 0 for s in value):
        return None
    return tuple(float(s) for s in value)


def site_backoff() -> tuple[float, ...]:
    """NOTIFICATIONS_BACKOFF as seconds if usable (`parse_backoff`) and no step is above
    MAX_DELAY_SECONDS (E006 says why), else the default."""
    backoff = parse_backoff(app_settings.BACKOFF)
    if backoff is None or max(backoff) > MAX_DELAY_SECONDS:
        return tuple(float(s) for s in Defaults.BACKOFF)
    return backoff


def max_attachment_bytes() -> int:
    """NOTIFICATIONS_MAX_ATTACHMENT_BYTES if it is a positive integer, else its default (E023 says why)."""
    return positive_int("MAX_ATTACHMENT_BYTES")


def attachment_storage() -> str:
    """NOTIFICATIONS_ATTACHMENT_STORAGE: the STORAGES alias attachments are kept in (W024 checks it)."""
    value = app_settings.ATTACHMENT_STORAGE
    return value if isinstance(value, str) and value else Defaults.ATTACHMENT_STORAGE


def digest_max_items() -> int:
    """NOTIFICATIONS_DIGEST_MAX_ITEMS if it is a positive integer, else its default (E035)."""
    return positive_int("DIGEST_MAX_ITEMS")


def low_priority_aging() -> float:
    """NOTIFICATIONS_LOW_PRIORITY_AGING in seconds if it is a positive number, else its default (E025)."""
    return positive_number("LOW_PRIORITY_AGING")


def email_backend() -> str | None:
    """NOTIFICATIONS_EMAIL_BACKEND: a dotted path, or None when unset or blank."""
    value = app_settings.EMAIL_BACKEND
    return value if isinstance(value, str) and value else None


def mailer() -> str:
    """NOTIFICATIONS_MAILER: the alias the tick sends through when a row names none; blank: none."""
    value = app_settings.MAILER
    return value if isinstance(value, str) else ""


def app_mailers() -> dict[str, Any]:
    """NOTIFICATIONS_MAILERS (aliases for sites before Django 6.1's MAILERS); {} unless a dict."""
    value = app_settings.MAILERS
    return dict(value) if isinstance(value, dict) else {}


def quiet_hours() -> str:
    """NOTIFICATIONS_QUIET_HOURS if it is a window (or blank), else blank (E017 says why)."""
    value = app_settings.QUIET_HOURS
    return value if isinstance(value, str) and not quiet.errors(value) else Defaults.QUIET_HOURS


def parse_secrets(value: Any) -> tuple[str, ...] | None:
    """The non-blank secrets of NOTIFICATIONS_WEBHOOK_SECRET; None unless a string, a list of strings or
    None (no key, as blank is: `os.environ.get(...)` of a variable that is not set)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        return None
    return tuple(s for s in value if s)


def parse_networks(value: Any) -> tuple[IPNetwork, ...]:
    """NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS as networks; bad entries are skipped.

    `manage.py check` reports bad entries (notifications.E011/E012); skipping them here
    only ever refuses more addresses, never fewer.
    """
    if isinstance(value, str) or not isinstance(value, Iterable):
        return ()
    networks = []
    for entry in value:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except (TypeError, ValueError):
            continue
    return tuple(networks)


@dataclass(frozen=True)
class Policy:
    """The retry settings: attempts of one firing, and the waits between them."""

    max_retries: int
    backoff: tuple[float, ...]

    @classmethod
    def from_settings(cls) -> Policy:
        return TickSettings.read().policy

    def for_row(self, max_retries: Any, backoff: Any) -> Policy:
        """This policy with a row's own `max_retries` and `backoff` where it has usable ones.

        Saving validates both; a value that reached the table some other way falls back
        to the site's here (and the tick dead-letters the row as invalid).
        """
        own = Policy(
            max_retries if is_positive(max_retries, integer=True) else self.max_retries,
            parse_backoff(backoff) or self.backoff,
        )
        return self if own == self else own


@dataclass(frozen=True)
class TickSettings:
    """Every setting one tick and its channels use, typed and read once.

    Numbers are positive and collections parsed (the allowed networks into `ipaddress`
    networks); a value `manage.py check` would report is replaced by its default.
    """

    limit: int  # rows claimed per batch (NOTIFICATIONS_TICK_LIMIT, or runtick --limit)
    budget: float  # seconds after which no new batch is claimed (or runtick --budget)
    lease: float  # seconds a claim lives
    channel_timeout: float  # total deadline of one channel send, in seconds
    concurrency: int  # rows delivered at once
    target_concurrency: int  # sends in flight to one target at most
    policy: Policy  # retries and backoff
    webhook_secrets: tuple[str, ...] | None  # the site's secrets, newest first; None: malformed (E009)
    allowed_networks: tuple[IPNetwork, ...]  # ranges a webhook may reach although refused by default
    response_body_limit: int  # bytes of a webhook response ever read
    attempt_retention_days: float  # days delivery records are kept
    inbox_retention_days: float  # days inbox messages are kept
    max_payload_bytes: int  # bytes of a payload's compact JSON
    max_clock_offset: float  # seconds of clock skew before it is reported
    quiet_hours: str  # the site's quiet window for rows without one of their own; blank: none
    queues: tuple[str, ...] = ()  # the queues whose rows this tick claims (runtick --queue); empty: all

    @classmethod
    def read(cls) -> TickSettings:
        """A snapshot of the settings as they are now (`override_settings` included)."""
        budget = positive_number("TICK_BUDGET")
        timeout = positive_number("CHANNEL_TIMEOUT")
        lease = app_settings.LEASE
        return cls(
            limit=positive_int("TICK_LIMIT"),
            budget=budget,
            lease=float(lease) if is_usable("LEASE", lease, integer=False) else derived_lease(budget, timeout),
            channel_timeout=timeout,
            concurrency=positive_int("CONCURRENCY"),
            target_concurrency=positive_int("TARGET_CONCURRENCY"),
            policy=Policy(
                max_retries=positive_int("MAX_RETRIES"),
                backoff=site_backoff(),
            ),
            webhook_secrets=parse_secrets(app_settings.WEBHOOK_SECRET),
            allowed_networks=parse_networks(app_settings.WEBHOOK_ALLOWED_NETWORKS),
            response_body_limit=positive_int("RESPONSE_BODY_LIMIT"),
            attempt_retention_days=positive_number("ATTEMPT_RETENTION_DAYS"),
            inbox_retention_days=positive_number("INBOX_RETENTION_DAYS"),
            max_payload_bytes=positive_int("MAX_PAYLOAD_BYTES"),
            max_clock_offset=positive_number("MAX_CLOCK_OFFSET"),
            quiet_hours=quiet_hours(),
        )

    def with_budget(self, budget: float) -> TickSettings:
        """These settings for a tick of another budget (`runtick --budget`): a derived lease
        grows with a longer budget (never shrinks); a lease set by hand must still outlive it
        (ValueError says why not)."""
        lease = self.lease
        if is_usable("LEASE", app_settings.LEASE, integer=False):
            problem = lease_too_short(lease, budget, self.channel_timeout)
            if problem:
                raise ValueError(f"{problem}: raise NOTIFICATIONS_LEASE or give a shorter budget")
        else:
            lease = max(lease, derived_lease(budget, self.channel_timeout))
        return replace(self, budget=budget, lease=lease)

    @property
    def max_retries(self) -> int:
        return self.policy.max_retries

    @property
    def backoff(self) -> tuple[float, ...]:
        return self.policy.backoff


# --- recipients' choices ---------------------------------------------------------------------


def categories() -> dict[str, category_rules.Category]:
    """NOTIFICATIONS_CATEGORIES, parsed (`notifications.rules.categories`); none when the
    setting is invalid (notifications.E040 says why)."""
    return category_rules.parse(app_settings.CATEGORIES)


def public_url() -> public_url_rules.PublicUrl:
    """NOTIFICATIONS_PUBLIC_URL as links can use it, with DEBUG as the site has it now
    (`notifications.rules.public_url`; notifications.W041 and W043 report it)."""
    return public_url_rules.read(app_settings.PUBLIC_URL, debug=bool(django_settings.DEBUG))


def loop_poll_interval() -> float:
    """Seconds between the ticks of a `runtick --loop` whose fast lane is silent (E036 reports a bad value)."""
    return positive_number("LOOP_POLL_INTERVAL")


# What NOTIFICATIONS_LISTEN_DATABASE may be besides an alias: a libpq URL.
LISTEN_URL_SCHEMES = ("postgres://", "postgresql://")


def listen_database() -> str:
    """NOTIFICATIONS_LISTEN_DATABASE: a DATABASES alias, a postgres:// URL, or blank (the
    queue's own connection; also when the value is not a string: W011 says why)."""
    value = app_settings.LISTEN_DATABASE
    return value.strip() if isinstance(value, str) else ""


def inbox_poll_seconds() -> float:
    """Seconds between the badge's requests for the counts (notifications.W053 reports a bad value)."""
    return positive_number("INBOX_POLL_SECONDS")


def inbox_allowed_origins() -> frozenset[str]:
    """The well-formed `https://` origins of NOTIFICATIONS_INBOX_ALLOWED_ORIGINS (W051 reports
    the others, which are left out: a malformed entry allows nothing)."""
    value = app_settings.INBOX_ALLOWED_ORIGINS
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        return frozenset()
    return frozenset(origin for origin in value if origin_rules.origin_problem(origin) is None)
