"""System checks for the app's settings and surroundings, reported by `manage.py check`.

Ids are stable and documented in docs/checks.md: E0xx are errors, values wrong in
themselves that stop `check`, `migrate` and the tick; W0xx are warnings about setups that
work but will surprise. A setting only some rows need (a webhook key, the attachments'
storage, a mailer, a site channel's class) is a warning, never an error: the tick holds
those rows (`Channel.held`, no retry spent) and sends the rest. A retired E id keeps its
number as a W id. A bad value is reported here rather than by a crash mid-tick.

| id   | what |
|------|------|
| E001 | TICK_LIMIT is not a positive integer |
| E002 | MAX_RETRIES is not a positive integer |
| E003 | CHANNEL_TIMEOUT is not a positive number |
| E004 | TICK_BUDGET is not a positive number |
| E005 | CONCURRENCY is not a positive integer |
| E006 | BACKOFF is not a non-empty list of positive seconds |
| E007 | LEASE is not a positive number |
| E008 | LEASE is not longer than TICK_BUDGET + CHANNEL_TIMEOUT |
| E009 | WEBHOOK_SECRET is not a string or a list of strings |
| E010 | WEBHOOK_SECRET is malformed |
| E011 | WEBHOOK_ALLOWED_NETWORKS is not a list |
| E012 | WEBHOOK_ALLOWED_NETWORKS holds something that is not a CIDR |
| E013 | RESPONSE_BODY_LIMIT is not a positive integer |
| E014 | ATTEMPT_RETENTION_DAYS is not a positive number |
| E015 | MAX_CLOCK_OFFSET is not a positive number |
| E016 | MAX_PAYLOAD_BYTES is not a positive integer |
| E017 | QUIET_HOURS is not blank or "HH:MM-HH:MM" |
| E018 | TARGET_CONCURRENCY is not a positive integer |
| E019 | CIRCUIT_BREAKER is not a dict of failures, cooldown and max_cooldown |
| E020 | RATE_LIMITS is not a dict of target -> "N/s,N/m,N/h,N/d" |
| E021 | (retired: now W010, a warning) |
| E022 | (retired: now W022, a warning) |
| E023 | MAX_ATTACHMENT_BYTES is not a positive integer |
| E024 | (retired: now W024, a warning) |
| E025 | LOW_PRIORITY_AGING is not a positive number |
| E026 | the queue's MariaDB/MySQL server has no SKIP LOCKED (MariaDB < 10.6, MySQL < 8.0.11) (database check) |
| E027 | (retired: now W027, a warning) |
| E028 | (retired: now W028, a warning) |
| E029 | ATTACHMENT_BYTES_IN_FLIGHT is not a positive integer |
| E030 | (retired: now W030, a warning) |
| E031 | (retired: now W031, a warning) |
| E032 | a CHANNELS name is a built-in channel's (email, webhook, inbox) |
| E033 | CHANNELS is not a dict of name -> {"BACKEND": ..., "OPTIONS": {...}} (a bad name, OPTIONS not a dict) |
| E034 | METRICS_TOKEN is not a string of printable ASCII without spaces around it |
| E040 | CATEGORIES is not a dict of category -> {"label", "default", "throttle", "channels"} |
| E041 | (retired: now W041, a warning) |
| E042 | UNSUBSCRIBE_MAILTO is not an email address |
| E035 | DIGEST_MAX_ITEMS is not a positive integer |
| W001 | BACKOFF has fewer steps than MAX_RETRIES - 1 |
| W002 | the SMTP backend is in use and its timeout (EMAIL_TIMEOUT, or the default mailer's) is unset |
| W003 | django_crontab is installed but there is no `crontab` binary |
| W004 | SQLite without WAL while ticks are expected to overlap |
| W005 | a NOTIFICATIONS_* setting the app does not know (a typo?) |
| W006 | that timeout, or django-anymail's REQUESTS_TIMEOUT (30 s unless set), is longer than CHANNEL_TIMEOUT |
| W007 | MariaDB/MySQL at an isolation level stronger than READ COMMITTED |
| W008 | MariaDB/MySQL connected with the 3-byte `utf8` character set, not `utf8mb4` |
| W009 | a queue table on MariaDB/MySQL in a non-transactional engine such as MyISAM (database check) |
| W010 | WEBHOOK_SECRET is set but holds no key, or is None (webhooks without a secret of their own are held) |
| W022 | the tick would send email through the queue itself, or through an alias that names no mailer (email held) |
| W024 | ATTACHMENT_STORAGE names no storage in STORAGES (email with attachments held) |
| W027 | the tick's email backend (or a NOTIFICATIONS_MAILERS alias's) names no email backend class (email held) |
| W028 | attachments are kept in a file storage whose location is relative or unset (email with attachments held) |
| W030 | a CHANNELS BACKEND cannot be imported (that channel's rows held) |
| W031 | a CHANNELS BACKEND is not a subclass of notifications.channels.Channel (that channel's rows held) |
| W040 | a category's "channels" names no channel of the site |
| W041 | PUBLIC_URL builds no links (unset while CATEGORIES are, http, malformed): mail that needs them is held |
| W043 | PUBLIC_URL is http://localhost or http://127.0.0.1, accepted while DEBUG is on |
| W100 | no tick has finished lately (database check) |
| W101 | a host's clock is further than MAX_CLOCK_OFFSET from the database's (database check) |

A number above its bound (`notifications.conf.MAXIMUMS`: more than a datetime, a column or a
tick can hold) is reported by its setting's id as any other invalid value is.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import re
import shutil
import socket
from datetime import UTC, datetime
from typing import Any, cast

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import connections, router

from notifications.channels.email.timeouts import mail_timeout
from notifications.conf import (
    MAX_DELAY_SECONDS,
    MAXIMUMS,
    Defaults,
    app_settings,
    is_backoff,
    is_positive,
    is_usable,
    lease_too_short,
    public_url,
)
from notifications.rules import quiet
from notifications.rules.secrets import secret_errors

# How long a tick may outlive its budget: one channel deadline plus the engine's grace.
TICK_OVERRUN_GRACE = 1.0
DEFAULT_TICK_INTERVAL = 60.0  # the README's cron line: every minute
WAL_PATTERN = re.compile(r"journal_mode\s*=\s*'?wal", re.IGNORECASE)

Messages = list[checks.CheckMessage]


def _number(name: str, value: Any, *, integer: bool, id: str) -> Messages:
    if is_usable(name, value, integer=integer):
        return []
    what = "a positive integer" if integer else "a positive number"
    if is_positive(value, integer=integer):  # too large: see conf.MAXIMUMS
        bound, unit = MAXIMUMS[name]
        what += f" no larger than {bound:,.0f} ({unit})"
    default = getattr(Defaults, name)
    hint = f"Remove NOTIFICATIONS_{name} to use the default"
    hint += f" ({default!r})." if default is not None else "."
    return [checks.Error(f"NOTIFICATIONS_{name} must be {what}, not {value!r}.", hint=hint, id=id)]


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> Messages:
    """Every NOTIFICATIONS_* value: type, range, and how the values fit together."""
    errors: Messages = []
    errors += _number("TICK_LIMIT", app_settings.TICK_LIMIT, integer=True, id="notifications.E001")
    errors += _number("MAX_RETRIES", app_settings.MAX_RETRIES, integer=True, id="notifications.E002")
    errors += _number("CHANNEL_TIMEOUT", app_settings.CHANNEL_TIMEOUT, integer=False, id="notifications.E003")
    errors += _number("TICK_BUDGET", app_settings.TICK_BUDGET, integer=False, id="notifications.E004")
    errors += _number("CONCURRENCY", app_settings.CONCURRENCY, integer=True, id="notifications.E005")
    errors += _number("TARGET_CONCURRENCY", app_settings.TARGET_CONCURRENCY, integer=True, id="notifications.E018")
    errors += _check_backoff()
    if app_settings.LEASE is not None:
        lease_errors = _number("LEASE", app_settings.LEASE, integer=False, id="notifications.E007")
        errors += lease_errors or _check_lease()
    errors += _check_secrets()
    errors += _check_networks()
    errors += _number("RESPONSE_BODY_LIMIT", app_settings.RESPONSE_BODY_LIMIT, integer=True, id="notifications.E013")
    errors += _number(
        "ATTEMPT_RETENTION_DAYS", app_settings.ATTEMPT_RETENTION_DAYS, integer=False, id="notifications.E014"
    )
    errors += _number("MAX_CLOCK_OFFSET", app_settings.MAX_CLOCK_OFFSET, integer=False, id="notifications.E015")
    errors += _number("MAX_PAYLOAD_BYTES", app_settings.MAX_PAYLOAD_BYTES, integer=True, id="notifications.E016")
    errors += _check_quiet_hours()
    errors += _check_flow_control()
    errors += _number("MAX_ATTACHMENT_BYTES", app_settings.MAX_ATTACHMENT_BYTES, integer=True, id="notifications.E023")
    errors += _check_attachment_storage()
    errors += _number(
        "ATTACHMENT_BYTES_IN_FLIGHT", app_settings.ATTACHMENT_BYTES_IN_FLIGHT, integer=True, id="notifications.E029"
    )
    errors += _number("LOW_PRIORITY_AGING", app_settings.LOW_PRIORITY_AGING, integer=False, id="notifications.E025")
    errors += _number("DIGEST_MAX_ITEMS", app_settings.DIGEST_MAX_ITEMS, integer=True, id="notifications.E035")
    errors += _check_unknown_settings()
    errors += _check_metrics_token()
    return errors


def _check_metrics_token() -> Messages:
    """A metrics token a scraper can send: visible ASCII, nothing around it.

    A WSGI server hands the Authorization header over as ISO-8859-1 text, whatever bytes
    the client sent, so a token with a character beyond ASCII never compares equal; nor
    does one with a control character (no header carries it) or with spaces around it
    (the header's value is stripped). The message never shows the token.
    """
    token = app_settings.METRICS_TOKEN
    if not token:
        return []
    if not isinstance(token, str):
        problem = f"must be a string, not {type(token).__name__}"
    elif not all(" " <= char <= "~" for char in token):
        problem = "holds a character beyond printable ASCII, which no request's Authorization header can match"
    elif token != token.strip():
        problem = "starts or ends with a space, which no request's Authorization header can match"
    else:
        return []
    return [
        checks.Error(
            f"NOTIFICATIONS_METRICS_TOKEN {problem}.",
            hint="Use a random ASCII token, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'. "
            "Until it is fixed, only staff users may read the metrics.",
            id="notifications.E034",
        )
    ]


CHANNELS_HINT = (
    'For example {"sms": {"BACKEND": "myapp.channels.SMSChannel", "OPTIONS": {"sender": "ACME"}}}; '
    "see docs/channels.md. Rows naming a channel that is not usable are refused as unknown."
)


@checks.register()
def check_channels(app_configs: Any = None, **kwargs: Any) -> Messages:
    """NOTIFICATIONS_CHANNELS: the shape of each entry, its name, its class."""
    from notifications import registry

    raw = app_settings.CHANNELS
    if not isinstance(raw, dict):
        return [
            checks.Error(
                f"NOTIFICATIONS_CHANNELS must be a dict of channel name -> settings, not {type(raw).__name__}.",
                hint=CHANNELS_HINT,
                id="notifications.E033",
            )
        ]
    messages: Messages = []
    for name, entry in raw.items():
        if name in registry.BUILT_IN:
            messages.append(
                checks.Error(
                    f"NOTIFICATIONS_CHANNELS[{name!r}]: {name!r} is a built-in channel; a site's channel "
                    "needs a name of its own.",
                    hint="Rename it, e.g. 'sms' or 'slack'.",
                    id="notifications.E032",
                )
            )
            continue
        problem = registry.entry_problem(name, entry)
        if problem is not None:
            messages.append(
                checks.Error(f"NOTIFICATIONS_CHANNELS: {problem}.", hint=CHANNELS_HINT, id="notifications.E033")
            )
            continue
        backend = entry["BACKEND"]
        try:
            registry.channel_class(registry.Entry(name, backend))
        # Warnings, not errors: only this channel's rows need the class (they are held, no
        # retry spent, until it loads) and the package may well be missing only where this
        # command runs; every other channel's rows go out.
        except ImportError as exc:
            messages.append(
                checks.Warning(
                    f"NOTIFICATIONS_CHANNELS[{name!r}]['BACKEND'] = {backend!r} cannot be imported: {exc}. "
                    f"{CHANNEL_HELD}",
                    hint="Give the dotted path of the class, e.g. 'myapp.channels.SMSChannel', and install "
                    "what it imports where the tick runs.",
                    id="notifications.W030",
                )
            )
        except TypeError:
            messages.append(
                checks.Warning(
                    f"NOTIFICATIONS_CHANNELS[{name!r}]['BACKEND'] = {backend!r} is not a subclass of "
                    f"notifications.channels.Channel. {CHANNEL_HELD}",
                    hint="Subclass notifications.channels.Channel and implement deliver(firing).",
                    id="notifications.W031",
                )
            )
    return messages


CHANNEL_HELD = "Rows naming the channel are held (nothing sent, no retry spent) until it loads."


def _check_backoff() -> Messages:
    backoff = app_settings.BACKOFF
    if not is_backoff(backoff):
        return [
            checks.Error(
                f"NOTIFICATIONS_BACKOFF must be a non-empty list of positive seconds, not {backoff!r}.",
                hint="For example [60, 300, 1800].",
                id="notifications.E006",
            )
        ]
    too_long = [step for step in backoff if step > MAX_DELAY_SECONDS]
    if too_long:
        _, unit = MAXIMUMS["BACKOFF"]
        return [
            checks.Error(
                f"NOTIFICATIONS_BACKOFF steps must be no larger than {MAX_DELAY_SECONDS:,} ({unit}), "
                f"not {too_long[0]!r}.",
                hint="For example [60, 300, 1800]. Until it is fixed, ticks use the default "
                f"({list(Defaults.BACKOFF)!r}).",
                id="notifications.E006",
            )
        ]
    max_retries = app_settings.MAX_RETRIES
    if is_positive(max_retries, integer=True) and len(backoff) < max_retries - 1:
        return [
            checks.Warning(
                f"NOTIFICATIONS_BACKOFF has {len(backoff)} steps but NOTIFICATIONS_MAX_RETRIES={max_retries} "
                f"needs {max_retries - 1}; the last step repeats.",
                hint="List one delay per retry.",
                id="notifications.W001",
            )
        ]
    return []


def _check_flow_control() -> Messages:
    from notifications.flow.breaker import breaker_errors  # imported here: they read the models
    from notifications.flow.ratelimit import limit_errors

    messages: Messages = []
    problems = breaker_errors(app_settings.CIRCUIT_BREAKER)
    if problems:
        messages.append(
            checks.Error(
                f"NOTIFICATIONS_CIRCUIT_BREAKER {problems[0]}.",
                hint='For example {"failures": 10, "cooldown": 60, "max_cooldown": 3600} (seconds), or '
                '{"failures": 0} to turn it off. Until it is fixed, ticks use those defaults.',
                id="notifications.E019",
            )
        )
    problems = limit_errors(app_settings.RATE_LIMITS)
    if problems:
        messages.append(
            checks.Error(
                f"NOTIFICATIONS_RATE_LIMITS: {problems[0]}.",
                hint='For example {"email": "14/s,50000/d", "hooks.example.com": "600/m", "*": "50/s"}. '
                "Until it is fixed, ticks send without limits.",
                id="notifications.E020",
            )
        )
    return messages


def _check_quiet_hours() -> Messages:
    value = app_settings.QUIET_HOURS
    problems = quiet.errors(value)
    if not problems:
        return []
    return [
        checks.Error(
            f"NOTIFICATIONS_QUIET_HOURS is not a quiet window: {problems[0]}",
            hint='For example "21:00-08:00" (read in each row\'s time zone; it may wrap midnight), '
            "or blank for none. Until it is fixed, rows without quiet hours of their own have none.",
            id="notifications.E017",
        )
    ]


def _check_lease() -> Messages:
    lease, budget, timeout = app_settings.LEASE, app_settings.TICK_BUDGET, app_settings.CHANNEL_TIMEOUT
    if not (is_usable("TICK_BUDGET", budget, integer=False) and is_usable("CHANNEL_TIMEOUT", timeout, integer=False)):
        return []  # E003/E004 already say what is wrong
    if lease_too_short(lease, budget, timeout) is None:
        return []
    return [
        checks.Error(
            f"NOTIFICATIONS_LEASE ({lease:g}s) must be longer than NOTIFICATIONS_TICK_BUDGET plus "
            f"NOTIFICATIONS_CHANNEL_TIMEOUT ({budget + timeout:g}s).",
            hint="A claim that expires while its tick still delivers lets a second tick send the same firing. "
            "Remove NOTIFICATIONS_LEASE to derive it from the budget and the timeout.",
            id="notifications.E008",
        )
    ]


def _check_secrets() -> Messages:
    secret = app_settings.WEBHOOK_SECRET
    # None: `os.environ.get("NOTIFICATIONS_WEBHOOK_SECRET")` without its variable; no key, as "" is.
    secrets = [secret] if isinstance(secret, str) else [] if secret is None else secret
    if not isinstance(secrets, (list, tuple)) or not all(isinstance(s, str) for s in secrets):
        return [
            checks.Error(
                f"NOTIFICATIONS_WEBHOOK_SECRET must be a string or a list of strings, not {type(secret).__name__}.",
                hint='For example "whsec_..." or, while rotating, ["whsec_new...", "whsec_old..."].',
                id="notifications.E009",
            )
        ]
    for position, value in enumerate(s for s in secrets if s):
        problems = secret_errors(value)
        if problems:
            # Never echo the secret itself: check output ends up in CI logs.
            return [
                checks.Error(
                    f"NOTIFICATIONS_WEBHOOK_SECRET (key {position + 1}) is malformed: {problems[0]}",
                    hint=KEY_HINT,
                    id="notifications.E010",
                )
            ]
    if not any(secrets) and hasattr(settings, "NOTIFICATIONS_WEBHOOK_SECRET"):
        # Set, so the site means to send webhooks, but empty (often `NOTIFICATIONS_WEBHOOK_SECRET=`
        # in an environment file): nothing can be signed with the site's key. A warning, not an
        # error: the tick holds those rows and sends the rest, and `migrate`, `test` or
        # `runserver` in a shell without the environment file have nothing to sign.
        return [
            checks.Warning(
                "NOTIFICATIONS_WEBHOOK_SECRET holds no key (its environment variable unset or blank?): webhooks "
                "without a webhook_secret of their own cannot be signed, and are held (no retry spent) until a key "
                "is set.",
                hint=f"Set a key, or remove the setting if every webhook row carries its own. {KEY_HINT}",
                id="notifications.W010",
            )
        ]
    return []


KEY_HINT = (
    "Generate one with: python -c \"import base64, os; print('whsec_' + base64.b64encode(os.urandom(32)).decode())\""
)


def _check_networks() -> Messages:
    networks = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(networks, str) or not isinstance(networks, (list, tuple)):
        return [
            checks.Error(
                f"NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS must be a list of CIDRs, not {networks!r}.",
                hint='For example ["127.0.0.0/8", "::1/128"] on a development machine.',
                id="notifications.E011",
            )
        ]
    for value in networks:
        try:
            ipaddress.ip_network(value, strict=False)
        except (ValueError, TypeError):
            return [
                checks.Error(
                    f"NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS holds {value!r}, which is not a CIDR.",
                    hint='For example "10.0.0.0/8".',
                    id="notifications.E012",
                )
            ]
    return []


def _check_unknown_settings() -> Messages:
    known = {name for name in vars(Defaults) if name.isupper()}
    messages: Messages = []
    for name in sorted(dir(settings)):
        if not name.startswith(app_settings.prefix):
            continue
        short = name[len(app_settings.prefix) :]
        if short in known:
            continue
        close = difflib.get_close_matches(short, known, n=1)
        hint = f"Did you mean NOTIFICATIONS_{close[0]}?" if close else "See docs/settings.md."
        messages.append(
            checks.Warning(
                f"{name} is not a setting of the notifications app; it has no effect.",
                hint=hint,
                id="notifications.W005",
            )
        )
    return messages


def _check_attachment_storage() -> Messages:
    from django.core.files.storage import InvalidStorageError, storages

    alias = app_settings.ATTACHMENT_STORAGE
    try:
        storages.backends[alias]  # the configuration only; nothing is opened
        if not isinstance(alias, str):
            raise InvalidStorageError(alias)
    except (InvalidStorageError, KeyError, TypeError):
        return [
            checks.Warning(
                f"NOTIFICATIONS_ATTACHMENT_STORAGE names {alias!r}, which is not in STORAGES: {ATTACHMENTS_HELD}",
                hint=f"Use one of {', '.join(map(repr, storages.backends))}, or remove the setting for 'default'.",
                id="notifications.W024",
            )
        ]
    return _check_attachment_location(alias)


# Only email with attachments needs the storage: a warning, so a site that never queues a
# file (a fresh project without MEDIA_ROOT) migrates, checks and ticks.
ATTACHMENTS_HELD = (
    "email with attachments is held (nothing sent, no retry spent) until it is fixed; every other row goes out."
)


def _check_attachment_location(alias: str) -> Messages:
    """W028: a file storage relative to the working directory (MEDIA_ROOT unset is the
    working directory itself) keeps what the site stored where a tick started by cron from
    $HOME does not look."""
    from django.core.files.storage import FileSystemStorage, storages
    from django.utils.module_loading import import_string

    from notifications.models.attachments import location_setting, relative_location

    config = cast(dict[str, Any], storages.backends[alias])  # a configuration, whatever the stubs say
    try:
        backend = import_string(config.get("BACKEND", ""))
    except ImportError:
        return []  # Django's own storage handling says so when it is used
    if not (isinstance(backend, type) and issubclass(backend, FileSystemStorage)):
        return []  # S3 and the like: every process reaches the same files
    try:
        relative = relative_location(backend(**(config.get("OPTIONS") or {})))
    except (TypeError, ValueError):
        return []
    if relative is None:
        return []
    setting = location_setting(alias)
    where = f"is {relative!r}, a relative path" if relative else "is unset"
    return [
        checks.Warning(
            f"Email attachments are kept in the storage {alias!r} (NOTIFICATIONS_ATTACHMENT_STORAGE), whose "
            f"location ({setting}) {where}: each process reads and writes them under its own working "
            f"directory, so a tick started by cron from another directory cannot find them; {ATTACHMENTS_HELD}",
            hint=f'Set {setting} to an absolute path, such as BASE_DIR / "media".',
            id="notifications.W028",
        )
    ]


@checks.register()
def check_mailer(app_configs: Any = None, **kwargs: Any) -> Messages:
    """W022: email must not be sent through the queue itself (each send would queue another row).
    W027: the backend the tick (or a mailer alias) sends through must be an email backend class.
    Warnings: only email needs the mailer, and the tick holds it (no retry spent) until fixed."""
    from notifications.mailers import alias_problems, aliases_setting, choose

    messages: Messages = []
    choice = choose()
    if choice.problem is not None:
        messages.append(
            checks.Warning(
                f"The tick cannot send email as configured: {choice.problem}. Rows with email are held "
                "(nothing sent, no retry spent) until this is fixed.",
                hint=_alias_hint(choice.alias)
                if choice.broken and choice.alias and aliases_setting() == "NOTIFICATIONS_MAILERS"
                else _backend_hint(aliases_setting() == "MAILERS", broken=choice.broken),
                id="notifications.W027" if choice.broken else "notifications.W022",
            )
        )
    for alias, bad in alias_problems().items():
        if choice.problem is not None and alias == choice.alias:
            continue  # said above
        messages.append(
            checks.Warning(
                f"Rows whose mailer is {alias!r} cannot be sent: {bad.problem}. schedule() refuses them, and "
                "the tick holds those already queued (nothing sent, no retry spent) until this is fixed.",
                hint=_alias_hint(alias),
                id="notifications.W027" if bad.broken else "notifications.W022",
            )
        )
    return messages


def _alias_hint(alias: str) -> str:
    return (
        f'Give NOTIFICATIONS_MAILERS[{alias!r}] a real backend, e.g. {{"BACKEND": '
        '"django.core.mail.backends.smtp.EmailBackend", "OPTIONS": {...}}, or remove the alias.'
    )


def _backend_hint(on_mailers: bool, *, broken: bool) -> str:
    if on_mailers:
        return (
            'Name the real mailer: NOTIFICATIONS_MAILER = "smtp" with MAILERS["smtp"] = {"BACKEND": '
            '"django.core.mail.backends.smtp.EmailBackend", "OPTIONS": {...}}.'
        )
    hint = (
        "Give the dotted path of an email backend class (a subclass of "
        "django.core.mail.backends.base.BaseEmailBackend), e.g. "
        if broken
        else "Name the real backend: "
    )
    return (
        hint + 'NOTIFICATIONS_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend" '
        "(or a provider's, e.g. django-anymail's)."
    )


@checks.register()
def check_email(app_configs: Any = None, **kwargs: Any) -> Messages:
    """A mail server or email provider that never answers must not hold a tick's worker past its deadline.

    The timeout is the default mailer's (MAILERS on Django 6.1+, EMAIL_* before): SMTP's,
    or django-anymail's REQUESTS_TIMEOUT for a provider's HTTP API (30 s unless set).
    """
    timeout = mail_timeout()
    if timeout is None:
        return []
    name, example = timeout.setting, timeout.example
    channel_timeout = app_settings.CHANNEL_TIMEOUT
    if timeout.seconds is None:
        return [
            checks.Warning(
                f"{name} is not set while the SMTP email backend is in use: a stuck mail server holds "
                "a tick's worker thread with no limit, after the tick has given up on it.",
                hint=f"Set {name} to at most NOTIFICATIONS_CHANNEL_TIMEOUT ({channel_timeout!r}s), e.g. {example}.",
                id="notifications.W002",
            )
        ]
    if (
        is_positive(timeout.seconds, integer=False)
        and is_positive(channel_timeout, integer=False)
        and timeout.seconds > channel_timeout
    ):
        default = ", anymail's default" if timeout.defaulted else ""
        return [
            checks.Warning(
                f"{name} ({timeout.seconds:g}s{default}) is longer than NOTIFICATIONS_CHANNEL_TIMEOUT "
                f"({channel_timeout:g}s): a slow {timeout.waits_on} may still accept a message after the tick "
                "recorded a timeout, and the retry sends it twice.",
                hint=f"Set {name} no higher than NOTIFICATIONS_CHANNEL_TIMEOUT.",
                id="notifications.W006",
            )
        ]
    return []


@checks.register()
def check_crontab(app_configs: Any = None, **kwargs: Any) -> Messages:
    """`manage.py crontab add` writes through the `crontab` binary; without it nothing ticks."""
    executable = getattr(settings, "CRONTAB_EXECUTABLE", None)  # django-crontab's own setting
    if not apps.is_installed("django_crontab") or shutil.which(executable or "crontab"):
        return []
    where = (
        f"CRONTAB_EXECUTABLE ({executable!r}) is not an executable"
        if executable
        else "there is no `crontab` binary on PATH"
    )
    return [
        checks.Warning(
            f"django_crontab is in INSTALLED_APPS but {where}, so `manage.py crontab add` cannot install the tick.",
            hint="Install cron (Debian/Ubuntu: apt install cron), or run `manage.py runtick --loop 60` under "
            "your process supervisor and remove django_crontab from INSTALLED_APPS.",
            id="notifications.W003",
        )
    ]


@checks.register()
def check_sqlite_concurrency(app_configs: Any = None, **kwargs: Any) -> Messages:
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


def cron_interval() -> float:
    """Seconds between ticks: from the `runtick` entry of CRONJOBS, else the README's every minute."""
    from croniter import croniter

    for job in getattr(settings, "CRONJOBS", None) or []:
        try:
            schedule, *rest = job
            if "runtick" not in repr(rest):
                continue
            times = croniter(schedule, datetime(2025, 1, 6, tzinfo=UTC))
            first, second = times.get_next(datetime), times.get_next(datetime)
            return (second - first).total_seconds()
        except Exception:  # noqa: BLE001, S112 - a malformed CRONJOBS entry is django-crontab's to report
            continue
    return DEFAULT_TICK_INTERVAL


@checks.register(checks.Tags.database)
def check_ticks_running(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> Messages:
    """W100: no tick has finished lately, so nothing is delivered. Runs with `check --database`."""
    from django.db import DatabaseError

    from notifications.health.queue import queue_health
    from notifications.models import TickRun

    if router.db_for_read(TickRun) not in (databases or ()):
        return []
    try:
        health = queue_health()
    except DatabaseError:
        return []  # tables not migrated yet: `migrate` runs database checks first
    if not health.stale:
        return []
    return [
        checks.Warning(
            health.warning or "No tick has finished lately.",
            hint="Install the cron line (python manage.py crontab add) or run `manage.py runtick --loop 60`; "
            "`manage.py notifications_status` shows the queue.",
            id="notifications.W100",
        )
    ]


CLOCK_HINT = (
    "Leases and due times are read on each host's own clock: a host ahead re-claims rows another tick is "
    "still sending, one behind sends late. Keep every host (and the database server) synchronised with NTP "
    "(chrony, systemd-timesyncd); `manage.py notifications_status` shows each host's offset."
)


@checks.register(checks.Tags.database)
def check_clock_skew(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> Messages:
    """W101: this host's clock, measured now, or a ticking host's, as its last tick measured it, is off.

    Runs with `check --database`. Reports only: ticks run whatever the clocks say.
    """
    from django.db import DatabaseError

    from notifications.health.clock import measure_offset
    from notifications.health.queue import clock_threshold, describe_offset, recorded_clock_offsets
    from notifications.models import TickRun

    alias = router.db_for_read(TickRun) or "default"
    if alias not in (databases or ()):
        return []
    limit = clock_threshold()
    offsets: dict[str, tuple[float, str]] = {}
    with contextlib.suppress(DatabaseError):  # tables not migrated yet: `migrate` runs database checks first
        offsets.update((host, (offset, "by its last tick")) for host, offset in recorded_clock_offsets(alias).items())
    here = socket.gethostname()[:255]
    measured = measure_offset(alias)
    if measured is not None:
        offsets[here] = (measured, "now")  # a live reading replaces this host's record
    return [
        checks.Warning(
            f"The clock of {host}{' (this host)' if host == here else ''} is {describe_offset(offset)} the "
            f"database's clock (measured {when}), more than NOTIFICATIONS_MAX_CLOCK_OFFSET ({limit:g}s).",
            hint=CLOCK_HINT,
            id="notifications.W101",
        )
        for host, (offset, when) in offsets.items()
        if abs(offset) > limit
    ]


# --- MariaDB/MySQL ------------------------------------------------------------------------

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
def check_mysql_settings(app_configs: Any = None, **kwargs: Any) -> Messages:
    """W007, W008: connection OPTIONS of a MariaDB/MySQL queue that cost correctness or speed."""
    alias = _mysql_alias()
    if alias is None:
        return []
    options = cast(dict[str, Any], settings.DATABASES[alias].get("OPTIONS") or {})
    return mysql_option_messages(alias, options)


def mysql_option_messages(alias: str, options: dict[str, Any]) -> Messages:
    """What is wrong with these OPTIONS of a MariaDB/MySQL database (Django's defaults: READ
    COMMITTED and the 3-byte `utf8`)."""
    messages: Messages = []
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
def check_mysql_server(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> Messages:
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


def mysql_server_messages(alias: str, server: str, version: tuple[int, ...], engines: dict[str, str]) -> Messages:
    """What is wrong with this MariaDB/MySQL server for the queue."""
    messages: Messages = []
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


# --- recipients: categories, the public origin of unsubscribe links ------------------------


@checks.register()
def check_categories(app_configs: Any = None, **kwargs: Any) -> Messages:
    from django.core.validators import validate_email

    from notifications.rules import categories as category_rules

    messages: Messages = []
    value = app_settings.CATEGORIES
    problems = category_rules.errors(value)
    if problems:
        messages.append(
            checks.Error(
                f"NOTIFICATIONS_CATEGORIES is invalid: {'; '.join(problems)}",
                hint='e.g. {"news": {"label": "Product news", "default": "on", "throttle": "3/d"}}; '
                'default is "on", "off" or "required".',
                id="notifications.E040",
            )
        )
    if not problems:
        messages += _check_category_channels(value)
    messages += _check_public_url(categorised=bool(value) and not problems)
    mailto = app_settings.UNSUBSCRIBE_MAILTO
    if mailto:
        try:
            validate_email(mailto)
        except Exception:  # noqa: BLE001 - ValidationError, or a value that is no string
            messages.append(
                checks.Error(
                    "NOTIFICATIONS_UNSUBSCRIBE_MAILTO must be an email address (List-Unsubscribe's mailto:).",
                    id="notifications.E042",
                )
            )
    return messages


def _check_category_channels(value: dict[str, Any]) -> Messages:
    """W040: a category's `channels` names no channel of the site (a typo?): not offered."""
    from notifications import registry

    names = registry.entries()
    return [
        checks.Warning(
            f"NOTIFICATIONS_CATEGORIES[{key!r}]['channels'] names {name!r}, which is no channel of the site: "
            "the preference centre does not offer it.",
            hint=f"Use the names of built-in channels or of NOTIFICATIONS_CHANNELS: {', '.join(names)}.",
            id="notifications.W040",
        )
        for key, options in value.items()
        for name in options.get("channels") or ()
        if name not in names
    ]


PUBLIC_URL_HINT = (
    "Set NOTIFICATIONS_PUBLIC_URL = 'https://example.com' (the site's https origin) and include "
    "notifications.urls in the URLconf; on a developer's machine, with DEBUG on, http://localhost:8000 "
    "or http://127.0.0.1:8000 will do (docs/recipients.md)."
)


def _check_public_url(*, categorised: bool) -> Messages:
    """W041: links cannot be built on NOTIFICATIONS_PUBLIC_URL (unset with categories, http,
    malformed): only the mail that needs them is held, so a warning. W043: an http loopback
    origin, accepted while DEBUG is on."""
    public = public_url()
    if public.development:
        return [
            checks.Warning(
                f"NOTIFICATIONS_PUBLIC_URL is {public.origin}: unsubscribe and preference links are http, "
                "accepted while DEBUG is on so they can be tried on this machine. Mail clients ignore an "
                "http List-Unsubscribe.",
                hint="Set the site's https origin before DEBUG goes off.",
                id="notifications.W043",
            )
        ]
    if not public.problem or not (categorised or app_settings.PUBLIC_URL):
        return []
    held = (
        "email of a category that is not required is held (not sent, no retry spent) until it is fixed; "
        "every other row is sent"
        if categorised
        else "no unsubscribe or preference link can be built"
    )
    return [checks.Warning(f"{public.problem}: {held}.", hint=PUBLIC_URL_HINT, id="notifications.W041")]
