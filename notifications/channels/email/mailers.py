"""How long the site's default mailer may wait, read from its settings (for checks W002/W006).

Django 6.1 moved email configuration into `MAILERS` (and refuses the `EMAIL_*` settings
once MAILERS is defined); before it, and on 6.1 sites that have not moved yet,
`EMAIL_BACKEND` and `EMAIL_TIMEOUT` say it. Django 6.1 warns about every read of an
`EMAIL_*` setting outside Django; a site still on them has had Django's own warning at
startup, so the checks read them without adding one.

Two kinds of backend wait on the network with a timeout of their own: Django's SMTP
backend (no timeout unless set) and django-anymail's HTTP API backends (its
`REQUESTS_TIMEOUT`, 30 s unless set).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.core import mail
from django.utils.module_loading import import_string

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
ANYMAIL_DEFAULT_TIMEOUT = 30  # seconds: anymail's REQUESTS_TIMEOUT when a site sets none
_EMAIL_SETTING_DEPRECATED = re.compile(r"The EMAIL_\w+ setting is deprecated")


@dataclass(frozen=True)
class MailTimeout:
    """The default mailer's network timeout and where it is set."""

    seconds: Any  # None: unset (SMTP waits forever)
    setting: str  # the setting's name as a site writes it
    example: str  # how to set it
    waits_on: str  # "mail server" or "email provider", for the message
    defaulted: bool = False  # anymail's own default, not the site's


def site_mailers() -> dict[str, Any] | None:
    """The site's MAILERS where Django reads them (6.1+, instead of EMAIL_BACKEND and EMAIL_*), else None."""
    mailers = getattr(settings, "MAILERS", None)
    if mailers is None or not hasattr(mail, "mailers"):
        return None
    return cast(dict[str, Any], mailers)


def email_setting(name: str, default: Any = None) -> Any:
    """An EMAIL_* setting, without Django 6.1's deprecation warning for reading it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_EMAIL_SETTING_DEPRECATED.pattern)
        return getattr(settings, name, default)


def mail_timeout() -> MailTimeout | None:
    """The default mailer's timeout, or None when its backend does not wait on the network
    (console, locmem, file) or is one the app does not know."""
    mailers = site_mailers()
    if mailers is not None:
        default = mailers.get("default") or {}
        backend = default.get("BACKEND", SMTP_BACKEND)
        options = default.get("OPTIONS") or {}
        if backend == SMTP_BACKEND:
            return MailTimeout(
                options.get("timeout"), 'MAILERS["default"]["OPTIONS"]["timeout"]', '"timeout": 10', "mail server"
            )
        return _anymail_timeout(backend, options.get("timeout"))
    backend = email_setting("EMAIL_BACKEND", SMTP_BACKEND)
    if backend == SMTP_BACKEND:
        return MailTimeout(email_setting("EMAIL_TIMEOUT"), "EMAIL_TIMEOUT", "EMAIL_TIMEOUT = 10", "mail server")
    return _anymail_timeout(backend, None)


def _anymail_timeout(backend: str, option: Any) -> MailTimeout | None:
    """A django-anymail backend that posts to its provider's HTTP API (requests)."""
    if not isinstance(backend, str) or not backend.startswith("anymail."):
        return None
    try:
        from anymail.backends.base_requests import AnymailRequestsBackend

        if not issubclass(import_string(backend), AnymailRequestsBackend):
            return None  # Amazon SES (boto3), console, test
    except ImportError:
        return None  # Django reports a backend it cannot import when it sends
    if option is not None:
        return MailTimeout(option, 'MAILERS["default"]["OPTIONS"]["timeout"]', '"timeout": 10', "email provider")
    anymail = getattr(settings, "ANYMAIL", None) or {}
    seconds = anymail.get("REQUESTS_TIMEOUT", getattr(settings, "ANYMAIL_REQUESTS_TIMEOUT", None))
    return MailTimeout(
        ANYMAIL_DEFAULT_TIMEOUT if seconds is None else seconds,
        'ANYMAIL["REQUESTS_TIMEOUT"]',
        '"REQUESTS_TIMEOUT": 10 in ANYMAIL',
        "email provider",
        defaulted=seconds is None,
    )
