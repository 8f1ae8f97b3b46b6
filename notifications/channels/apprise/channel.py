"""`AppriseChannel`: one firing to every Apprise URL of the channel's OPTIONS.

- `OPTIONS["urls"]`: one Apprise URL or a list. A `{to}` in a URL is filled from the row's
  `channel_data[<name>]["to"]` (URL-quoted), so one channel texts each row's own number.
- The title is the row's subject and the body its body, rendered as the email channel
  renders them (the site's templates with `template`, the row's `language`).
- The send runs under the channel's total deadline: Apprise's own call limit, each
  service's socket timeouts, and the webhook transport's watchdog on every socket.
- HTTP(S) services connect through the webhook's address guard (`guarded`).
- Errors are the service's own words (Apprise 2.x reports them per service; with 1.9 the
  services are sent one by one and their words read from Apprise's log, `said`), and
  never hold a URL's credentials: Apprise's `url(privacy=True)` names a service, and
  every secret part of the URLs is masked out of what a service said.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured, ValidationError

from notifications.channels.base import Channel, ChannelResult, ErrorClass, Firing
from notifications.channels.http import transport
from notifications.content.email import render_content, template_field_errors
from notifications.content.templating import TemplateRenderError, template_errors

try:
    import apprise
except ImportError as exc:  # the extra is not installed: the checks report it (W030) and its rows are held
    raise ImportError(
        'notifications.channels.apprise needs Apprise: pip install "django-notification-queue[apprise]"'
    ) from exc

from notifications.channels.apprise import guarded, said

if TYPE_CHECKING:
    from notifications.conf import TickSettings
    from notifications.models import Notification

TO = "{to}"
# Characters of a recipient kept as they are in a URL (a phone number's +, an address's @).
TO_SAFE = "+@"
# What Apprise splits a target list on (its STRING_DELIMITERS: commas, semicolons, brackets,
# whitespace), and what would change the URL's path: a `to` holding one is several recipients.
_NOT_ONE = re.compile(r"[\[\];,\s/?#]")
# Longest error kept from what a service said: `last_error` is a line, not a log.
MAX_ERROR_CHARS = 300
# Pieces of a URL that are not secrets: separators, and words too short to be a token.
_SPLIT = re.compile(r"[/:@?&=#,;+ ]+")
MIN_SECRET_CHARS = 4
MASK = "****"


def _as_list(urls: Any) -> list[str]:
    if isinstance(urls, str):
        return [urls]
    if isinstance(urls, Sequence) and urls and all(isinstance(u, str) for u in urls):
        return list(urls)
    raise ImproperlyConfigured('AppriseChannel OPTIONS["urls"] must be an Apprise URL or a non-empty list of them')


class AppriseChannel(Channel):
    """Sends a firing to each of `urls` through Apprise; a success when every one took it."""

    def __init__(self, *, urls: str | Sequence[str], **options: Any) -> None:
        super().__init__(urls=urls, **options)
        self.urls = _as_list(urls)
        for url in self.urls:  # a URL Apprise cannot read is a configuration error, now
            if apprise.Apprise.instantiate(url.replace(TO, "0"), suppress_exceptions=True) is None:
                raise ImproperlyConfigured(f"AppriseChannel: {_scheme(url)}:// URL is not one Apprise can use")
        self._adapter = guarded.new_adapter()
        self._watchdog = transport.Watchdog()
        self._allowed: Any = None

    @classmethod
    def open(cls, name: str, options: dict[str, Any], settings: TickSettings | None = None) -> Channel:
        channel = super().open(name, options, settings)
        assert isinstance(channel, AppriseChannel)
        if settings is not None:
            channel._allowed = settings.allowed_networks
        return channel

    # --- the row ----------------------------------------------------------------------------

    def validate(self, data: Any) -> None:
        """An object; with a `{to}` in the URLs, its `to` is the recipient."""
        if not isinstance(data, dict):
            raise ValidationError('Give an object: {"to": "+15551234567"}, or {} when the URLs name the recipient.')
        if not any(TO in url for url in self.urls):
            return
        to = data.get("to")
        if not isinstance(to, str) or not to.strip():
            raise ValidationError("Give the recipient as 'to': the channel's URLs send to {to}.")
        if _NOT_ONE.search(to.strip()):
            raise ValidationError("'to' must be one recipient: no commas, semicolons, brackets, spaces, /, ? or #.")

    def row_errors(self, row: Notification) -> dict[str, list[str]]:
        errors = super().row_errors(row)
        if row.template:
            errors.setdefault("template", []).extend(template_field_errors(row.template))
        else:
            errors.setdefault("subject", []).extend(template_errors(row.subject or ""))
            errors.setdefault("body", []).extend(template_errors(row.body or ""))
        return {field: messages for field, messages in errors.items() if messages}

    def destination(self, row: Notification) -> str:
        data = row.channel_data.get(self.name) if isinstance(row.channel_data, dict) else None
        to = data.get("to") if isinstance(data, dict) else None
        services = ", ".join(dict.fromkeys(_scheme(url) for url in self.urls))
        return f"{to} ({services})" if isinstance(to, str) and to else services

    # --- the send ---------------------------------------------------------------------------

    def deliver(self, firing: Firing) -> ChannelResult:
        row = firing.notification
        try:
            content = render_content(row)
        except TemplateRenderError as exc:
            return self.failed(f"template: {exc}", ErrorClass.PERMANENT)
        urls = self.filled(row)
        secrets = _secrets(urls)
        services = []
        for url in urls:
            service = apprise.Apprise.instantiate(url, suppress_exceptions=True)
            if service is None:  # `to` made the URL unusable
                return self.failed(f"{_scheme(url)}:// URL is not valid with this recipient", ErrorClass.PERMANENT)
            service.socket_connect_timeout = service.socket_read_timeout = self.timeout
            services.append(service)
        body, title = content.body or " ", content.subject
        started = time.monotonic()
        with (
            transport.deadline(self.timeout, self._watchdog, self._allowed) as limit,
            guarded.guarded(self._adapter) as refused,
        ):
            if PER_SERVICE_RESULTS:
                result = apprise.Apprise(services).notify(body=body, title=title, timeout=self.timeout)
                outcome = self.outcome(result, secrets)
            else:
                outcome = self.one_by_one(services, body, title, secrets)
        if refused:  # the guard's words: which host, which address, why (never the URL)
            return self.failed(str(refused[0]), ErrorClass.PERMANENT)
        if not outcome.ok and (limit.expired or time.monotonic() - started >= self.timeout):
            return self.failed(f"timed out after {self.timeout:g}s")  # whichever timer fired
        return outcome

    def filled(self, row: Notification) -> list[str]:
        data = row.channel_data.get(self.name) if isinstance(row.channel_data, dict) else None
        to = data.get("to") if isinstance(data, dict) else None
        value = quote(to.strip(), safe=TO_SAFE) if isinstance(to, str) else ""
        return [url.replace(TO, value) for url in self.urls]

    def outcome(self, result: Any, secrets: set[str]) -> ChannelResult:
        """The channel's result from Apprise 2.x's per-service results."""
        if not hasattr(result, "results"):  # a 2.x release that answers with a bool
            return ChannelResult(self.name) if result else self.failed("the service refused the message")
        failures = [r for r in result.results if not r]
        if bool(result) and not failures:
            return ChannelResult(self.name)
        if not failures:  # nothing was attempted (no service matched)
            return self.failed("no service was notified")
        timed_out = all(_status(r) == "TIMEOUT" for r in failures)
        said = "; ".join(_said(r, secrets) for r in failures)
        if timed_out:
            return self.failed(f"timed out after {self.timeout:g}s ({said})")
        return self.failed(said)

    def one_by_one(self, services: list[Any], body: str, title: str, secrets: set[str]) -> ChannelResult:
        """Apprise 1.9, whose `notify()` says only whether it worked: one service at a time,
        in this thread, each one's refusal in the words it logged (`said.listening`)."""
        refusals = []
        for service in services:
            with said.listening() as words:
                ok = apprise.Apprise([service]).notify(body=body, title=title)
            if not ok:
                last = " ".join(words[-1].split()) if words else "the service refused the message"
                refusals.append(_mask(f"{service.service_name}: {last}", secrets))
        return self.failed("; ".join(refusals)) if refusals else ChannelResult(self.name)

    def failed(self, error: str, error_class: ErrorClass = ErrorClass.TRANSIENT) -> ChannelResult:
        return ChannelResult(self.name, error=f"{self.name}: {error}"[:MAX_ERROR_CHARS], error_class=error_class)

    def close(self) -> None:
        self._adapter.close()
        self._watchdog.close()


# Apprise 2.x: `notify()` takes a limit on the whole call and returns each service's result.
PER_SERVICE_RESULTS = "timeout" in inspect.signature(apprise.Apprise.notify).parameters


def _status(service_result: Any) -> str:
    status = getattr(service_result, "status", None)
    return getattr(status, "name", str(status))


def _said(service_result: Any, secrets: set[str]) -> str:
    """`Slack: <the last warning or error it logged>`, credentials masked."""
    words = ""
    for attempt in getattr(service_result, "attempts", ()):
        for entry in getattr(attempt, "logs", ()):
            if getattr(entry, "level", "") in ("WARNING", "ERROR", "CRITICAL"):
                words = str(getattr(entry, "message", ""))
    words = words or _status(service_result).lower().replace("failure", "failed")
    return _mask(f"{getattr(service_result, 'name', 'service')}: {' '.join(words.split())}", secrets)


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower() if "://" in url else "apprise"


def _secrets(urls: list[str]) -> set[str]:
    """The parts of `urls` that their private form hides (tokens, passwords, keys)."""
    found: set[str] = set()
    for url in urls:
        service = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        shown = set(_SPLIT.split(service.url(privacy=True))) if service is not None else set()  # type: ignore[no-untyped-call]
        found |= {part for part in _SPLIT.split(url.partition("://")[2]) if len(part) >= MIN_SECRET_CHARS} - shown
    return found


def _mask(text: str, secrets: set[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
