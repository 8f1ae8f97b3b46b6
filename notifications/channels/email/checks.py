"""The email channel's own system checks (`EmailAnswers.check`): the mailer the tick sends
through (W022, W027), its timeout (W002, W006) and the attachments' storage (W024, W028).
Warnings: only email needs them, and the tick holds it (no retry spent) until they are fixed."""

from __future__ import annotations

from typing import Any, cast

from django.core import checks

from notifications.channels.email.timeouts import mail_timeout
from notifications.conf import (
    app_settings,
    is_positive,
)


def check_mailer(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W022: email must not be sent through the queue itself (each send would queue another row).
    W027: the backend the tick (or a mailer alias) sends through must be an email backend class.
    Warnings: only email needs the mailer, and the tick holds it (no retry spent) until fixed."""
    from notifications.channels.email.mailers import alias_problems, aliases_setting, choose

    messages: list[checks.CheckMessage] = []
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


def check_email(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
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


def check_attachment_storage() -> list[checks.CheckMessage]:
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


def _check_attachment_location(alias: str) -> list[checks.CheckMessage]:
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
