"""Which mail backend the tick sends a row's email through, and configurations that cannot work.

Read from the site's settings only (so validation, the channel, the checks and the admin
share it); the layer of `notifications.content`.

In order:

1. The row's own `mailer`: an alias of Django 6.1's `MAILERS` (on a site that has them),
   else of `NOTIFICATIONS_MAILERS` (the same shape, for sites before MAILERS).
2. `NOTIFICATIONS_MAILER`: such an alias, for every row that names none.
3. `NOTIFICATIONS_EMAIL_BACKEND`: a dotted backend path (configured by the EMAIL_* settings).
4. The site's default mailer (`MAILERS["default"]`, or `EMAIL_BACKEND`), unless that is the
   queue itself (`notifications.mail.QueuedEmailBackend`): then Django's SMTP backend.

A configuration that ends at the queue itself would turn each send into another queued
row, for ever. `manage.py check` reports it (notifications.W022), and the tick holds the
rows it concerns (no retry spent, nothing sent) until it is fixed; so is an alias that
names no mailer, and a backend setting that names no email backend class (a typo in its
dotted path, or not a string: notifications.W027), which would fail every send. On a
site that has MAILERS and puts the queue in `MAILERS["default"]`, step 4 has no SMTP
settings to fall back on: name the real mailer in NOTIFICATIONS_MAILER.
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, cast

from django.conf import settings
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.utils.module_loading import import_string

from notifications.conf import app_mailers, app_settings, email_backend, mailer

QUEUE_BACKEND = "notifications.mail.QueuedEmailBackend"
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
_EMAIL_SETTING_DEPRECATED = re.compile(r"The EMAIL_\w+ setting is deprecated")


def site_mailers() -> dict[str, Any] | None:
    """The site's MAILERS where Django reads them (6.1+, instead of EMAIL_BACKEND and EMAIL_*), else None."""
    mailers = getattr(settings, "MAILERS", None)
    if mailers is None or not hasattr(mail, "mailers"):
        return None
    return cast(dict[str, Any], mailers)


def email_setting(name: str, default: Any = None) -> Any:
    """An EMAIL_* setting, without Django 6.1's deprecation warning for reading it (a site
    still on them has had Django's own warning at startup)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_EMAIL_SETTING_DEPRECATED.pattern)
        return getattr(settings, name, default)


@dataclass(frozen=True)
class Choice:
    """Where a row's email goes: an alias (of MAILERS, or NOTIFICATIONS_MAILERS), or a dotted path."""

    backend: str  # the dotted path of the backend class
    alias: str = ""  # the alias it was found under, blank for a path
    options: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the setting that chose it, for messages
    problem: str | None = None  # why it cannot be used (the queue itself, an unknown alias)
    broken: bool = False  # the problem is the backend setting itself (W027), not the choice (W022)


@functools.lru_cache(maxsize=64)
def _is_queue_class(path: str) -> bool:
    try:
        backend = import_string(path)
    except ImportError:
        return False
    # The queued backend says so itself (notifications.mail sits above this module's layer).
    return isinstance(backend, type) and bool(getattr(backend, "queues_notifications", False))


@functools.lru_cache(maxsize=64)
def _backend_class_problem(path: str) -> str | None:
    try:
        backend = import_string(path)
    except (ImportError, AttributeError) as exc:  # import_string turns a missing name into ImportError
        return f"cannot be imported ({type(exc).__name__}: {exc})"
    if not (isinstance(backend, type) and issubclass(backend, BaseEmailBackend)):
        return "is not an email backend (a subclass of django.core.mail.backends.base.BaseEmailBackend)"
    return None


def backend_problem(path: Any) -> str | None:
    """Why `path` (a BACKEND setting) names no email backend class, or None (notifications.W027)."""
    if not isinstance(path, str) or not path:
        return f"must be a dotted path to an email backend class, not {path!r}"
    return _backend_class_problem(path)


def is_queue(path: Any) -> bool:
    """Whether the dotted path `path` names the queued backend (or a subclass of it)."""
    return isinstance(path, str) and _is_queue_class(path)


def aliases() -> dict[str, Any]:
    """The mailer aliases rows may name: MAILERS on Django 6.1+ sites that have it, else NOTIFICATIONS_MAILERS."""
    mailers = site_mailers()
    return dict(mailers) if mailers is not None else app_mailers()


def aliases_setting() -> str:
    return "MAILERS" if site_mailers() is not None else "NOTIFICATIONS_MAILERS"


def _from_alias(alias: str, source: str) -> Choice:
    config = aliases().get(alias)
    if not isinstance(config, dict):
        return Choice(
            "", alias, source=source, problem=f"{source} names {alias!r}, which is not in {aliases_setting()}"
        )
    backend = config.get("BACKEND", SMTP_BACKEND)
    options = config.get("OPTIONS") or {}
    if not isinstance(backend, str) or not isinstance(options, dict):
        problem = f"{aliases_setting()}[{alias!r}] is malformed"
        return Choice("", alias, source=source, problem=problem, broken=True)
    choice = Choice(backend, alias, dict(options), source)
    if is_queue(backend):
        return Choice(backend, alias, dict(options), source, problem=f"{source} {alias!r} is the queue itself")
    return _usable(choice, f"{aliases_setting()}[{alias!r}]['BACKEND']")


def choose(row_mailer: str = "") -> Choice:
    """Where email of a row whose `mailer` is `row_mailer` goes (see the module's steps)."""
    if row_mailer:
        return _from_alias(row_mailer, "the row's mailer")
    if mailer():
        return _from_alias(mailer(), "NOTIFICATIONS_MAILER")
    path = email_backend()
    if path is None and app_settings.EMAIL_BACKEND not in (None, ""):  # set, but not a string
        unusable = backend_problem(app_settings.EMAIL_BACKEND)
        problem = f"NOTIFICATIONS_EMAIL_BACKEND {unusable}"
        return Choice("", source="NOTIFICATIONS_EMAIL_BACKEND", problem=problem, broken=True)
    if path is not None:
        if is_queue(path):
            return Choice(
                path, source="NOTIFICATIONS_EMAIL_BACKEND", problem="NOTIFICATIONS_EMAIL_BACKEND is the queue itself"
            )
        return _usable(Choice(path, source="NOTIFICATIONS_EMAIL_BACKEND"), "NOTIFICATIONS_EMAIL_BACKEND")
    mailers = site_mailers()
    if mailers is not None:
        default = mailers.get("default") or {}
        backend = default.get("BACKEND", SMTP_BACKEND) if isinstance(default, dict) else ""
        if is_queue(backend):
            return Choice(
                backend,
                "default",
                source='MAILERS["default"]',
                problem='MAILERS["default"] is the queue itself and NOTIFICATIONS_MAILER names no other mailer',
            )
        options = default.get("OPTIONS") or {} if isinstance(default, dict) else {}
        return Choice(backend, "default", dict(options) if isinstance(options, dict) else {}, 'MAILERS["default"]')
    backend = email_setting("EMAIL_BACKEND", SMTP_BACKEND)
    if is_queue(backend):
        return Choice(SMTP_BACKEND, source="NOTIFICATIONS_EMAIL_BACKEND's default")
    return _usable(Choice(backend, source="EMAIL_BACKEND"), "EMAIL_BACKEND")


def _usable(choice: Choice, setting: str) -> Choice:
    """`choice`, or the same with a problem when its backend names no email backend class:
    each send would fail (a retry spent, in the end a dead letter) until the setting is fixed."""
    unusable = backend_problem(choice.backend)
    if unusable is None:
        return choice
    return replace(choice, problem=f"{setting} ({choice.backend!r}) {unusable}", broken=True)


def alias_problems() -> dict[str, Choice]:
    """The NOTIFICATIONS_MAILERS aliases rows may name but cannot be sent through (the queue
    itself, malformed, a backend that cannot be imported): alias -> its choice, problem set.
    Empty on sites with Django's MAILERS, whose aliases host code may also use for itself."""
    if site_mailers() is not None:
        return {}
    choices = {alias: _from_alias(alias, "NOTIFICATIONS_MAILERS") for alias in app_mailers()}
    return {alias: choice for alias, choice in choices.items() if choice.problem is not None}


def problem(row_mailer: str = "") -> str | None:
    """Why email of a row with this `mailer` cannot be sent as configured, or None."""
    return choose(row_mailer).problem


def open_connection(row_mailer: str = "") -> BaseEmailBackend:
    """A new, unopened connection of the backend `choose(row_mailer)` gives.

    Django 6.1+ sites on MAILERS get their aliases from `mail.mailers`; a dotted path (and
    NOTIFICATIONS_MAILERS before 6.1) is built as `get_connection()` would build it.
    """
    choice = choose(row_mailer)
    if choice.problem is not None:
        raise LookupError(choice.problem)
    handler = getattr(mail, "mailers", None)
    if handler is not None and choice.alias and site_mailers() is not None:
        connection: BaseEmailBackend = handler[choice.alias]
        return connection
    if handler is not None and choice.alias == "" and choice.source == "EMAIL_BACKEND":
        connection = handler.default  # a 6.1 site still on EMAIL_*: Django builds it from them
        return connection
    backend_class = import_string(choice.backend)
    with warnings.catch_warnings():
        # Django 6.1 deprecates building a backend outside `mail.mailers` (a site still on the
        # EMAIL_* settings has had Django's own warning for those at startup).
        warnings.filterwarnings("ignore", message=r"Directly creating EmailBackend instances is deprecated")
        connection = backend_class(**choice.options) if choice.options else backend_class()
    return connection
