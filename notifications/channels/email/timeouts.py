"""How long the mailer the tick sends through may wait, read from its settings (for checks W002/W006).

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

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from notifications.channels.email.mailers import SMTP_BACKEND, choose, email_setting, site_mailers

ANYMAIL_DEFAULT_TIMEOUT = 30  # seconds: anymail's REQUESTS_TIMEOUT when a site sets none


@dataclass(frozen=True)
class MailTimeout:
    """The default mailer's network timeout and where it is set."""

    seconds: Any  # None: unset (SMTP waits forever)
    setting: str  # the setting's name as a site writes it
    example: str  # how to set it
    waits_on: str  # "mail server" or "email provider", for the message
    defaulted: bool = False  # anymail's own default, not the site's


def mail_timeout() -> MailTimeout | None:
    """The timeout of the mailer the tick sends through (`notifications.channels.email.mailers.choose`: the
    site's default, or NOTIFICATIONS_MAILER / NOTIFICATIONS_EMAIL_BACKEND), or None when its
    backend does not wait on the network (console, locmem, file) or is one the app does not know."""
    choice = choose()
    if choice.problem is not None:
        return None  # W022 says what is wrong
    if choice.alias and site_mailers() is not None:
        options = choice.options
        where = f'MAILERS["{choice.alias}"]["OPTIONS"]["timeout"]'
        if choice.backend == SMTP_BACKEND:
            return MailTimeout(options.get("timeout"), where, '"timeout": 10', "mail server")
        return _anymail_timeout(choice.backend, options.get("timeout"), where)
    if choice.alias:  # NOTIFICATIONS_MAILERS, before Django 6.1
        options = choice.options
        where = f'NOTIFICATIONS_MAILERS["{choice.alias}"]["OPTIONS"]["timeout"]'
        if choice.backend == SMTP_BACKEND:
            timeout = options.get("timeout", email_setting("EMAIL_TIMEOUT"))
            return MailTimeout(timeout, where, '"timeout": 10', "mail server")
        return _anymail_timeout(choice.backend, options.get("timeout"), where)
    if choice.backend == SMTP_BACKEND:
        return MailTimeout(email_setting("EMAIL_TIMEOUT"), "EMAIL_TIMEOUT", "EMAIL_TIMEOUT = 10", "mail server")
    return _anymail_timeout(choice.backend, None, "")


def _anymail_timeout(backend: str, option: Any, where: str) -> MailTimeout | None:
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
        return MailTimeout(option, where, '"timeout": 10', "email provider")
    anymail = getattr(settings, "ANYMAIL", None) or {}
    seconds = anymail.get("REQUESTS_TIMEOUT", getattr(settings, "ANYMAIL_REQUESTS_TIMEOUT", None))
    return MailTimeout(
        ANYMAIL_DEFAULT_TIMEOUT if seconds is None else seconds,
        'ANYMAIL["REQUESTS_TIMEOUT"]',
        '"REQUESTS_TIMEOUT": 10 in ANYMAIL',
        "email provider",
        defaulted=seconds is None,
    )
