"""What the webhook channel asks of a row's own fields (`WebhookAnswers.row_errors`).

The URL is http(s) with a host, a valid port and no credentials, and the secret one the
channel can sign with; both hold for a URL given on a row that does not name the channel
too. A URL whose host is a literal refused address is refused on save (`policy_errors`:
it depends on NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS); the channel applies the URL rule
again at send time, to rows that reached the table without validation.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests

from notifications.conf import app_settings, parse_networks
from notifications.models import validation
from notifications.models.validation import Errors
from notifications.rules import network
from notifications.rules.secrets import secret_errors

if TYPE_CHECKING:
    from notifications.models import Notification

# A host name is at most 253 characters (RFC 1034 3.1), as Django's URLValidator says for
# rows it sees; a longer one (reached by bulk_create) would not fit the flow-control
# columns its target is stored in (Target, RateBucket) and crash every tick.
MAX_HOST_CHARS = 253
# Distinct URLs whose verdict is remembered: the rule is a pure function of the text, and
# a tick checks the same few URLs once per row at the claim and again at the send.
URLS_REMEMBERED = 1024


def row_errors(row: Notification, *, needed: bool) -> Errors:
    """The URL and secret of `row` (`needed`: the row names the channel, so a URL is required)."""
    if not row.webhook_url:
        return {"webhook_url": ["The webhook channel needs a URL."] if needed else []}
    secret = secret_errors(row.webhook_secret) if row.webhook_secret else []
    return {"webhook_url": url_errors(row.webhook_url), "webhook_secret": secret}


def policy_errors(row: Notification) -> Errors:
    """A URL given (valid as a URL) whose host is a refused literal address, under the site's setting."""
    if row.webhook_url and not url_errors(row.webhook_url):
        messages = address_errors(row.webhook_url)
        if messages:
            return {"webhook_url": messages}
    return {}


def host_length(host: str) -> int:
    """Characters of `host` as DNS spells it (IDNA-encoded), or as typed if it cannot be."""
    try:
        return len(host.encode("idna"))
    except UnicodeError:  # a label over 63 characters, or not encodable: count what is there
        return len(host.encode("utf-8", "replace"))


def url_errors(url: str) -> list[str]:
    """A webhook URL is http(s) with a host, a valid port and no credentials (the same
    answer for the same URL within `validation.batch()`)."""
    return validation.remembered("webhook_url", url, _url_errors)


def _url_errors(url: str) -> list[str]:
    return list(_url_verdict(url)) if isinstance(url, str) else _url_rule(url)


@functools.lru_cache(maxsize=URLS_REMEMBERED)
def _url_verdict(url: str) -> tuple[str, ...]:
    return tuple(_url_rule(url))


def _url_rule(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return [f"Not a valid URL: {exc}."]
    if parts.scheme not in ("http", "https"):
        return ["Webhook URLs must use http or https."]
    if not parts.hostname:
        return ["The webhook URL has no host."]
    if host_length(parts.hostname) > MAX_HOST_CHARS:
        return [f"The webhook URL's host is longer than {MAX_HOST_CHARS} characters."]
    if parts.username is not None or parts.password is not None:
        return ["Put credentials in the payload or the signature, not in the URL."]
    if not parts.hostname.isascii():
        try:  # as the request will name it: requests IDNA-encodes the host (IDNA 2008)
            requests.PreparedRequest().prepare_url(url, None)
        except requests.exceptions.InvalidURL:
            return ["The webhook URL's host is not a name a request can be sent to (IDNA)."]
    return []


def allowed_networks() -> tuple[Any, ...]:
    """NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS parsed (`conf.parse_networks`), once per value
    of the setting rather than once per row validated."""
    value = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(value, list | tuple) and all(isinstance(entry, str) for entry in value):
        return _parsed_networks(tuple(value))
    return parse_networks(value)


@functools.lru_cache(maxsize=16)
def _parsed_networks(entries: tuple[str, ...]) -> tuple[Any, ...]:
    return parse_networks(entries)


def address_errors(url: str) -> list[str]:
    """A URL whose host is a literal refused address (any spelling) is refused up front
    (the same answer for the same URL within `validation.batch()`: the setting is read once).

    Names are checked when the tick resolves them (see `notifications.channels.http.guard`): their
    addresses can change, so a check now would prove nothing then.
    """
    return validation.remembered("webhook_address", url, _address_errors)


def _address_errors(url: str) -> list[str]:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return []
    networks = validation.per_batch("webhook_allowed_networks", allowed_networks)
    refused = network.literal_refusal(host, networks) if host else None
    if refused is None:
        return []
    address, reason = refused
    shown = host if host == str(address) else f"{host} ({address})"
    return [
        f"Webhooks may not reach {shown}: it is {reason}. Use a public address, or open the range "
        "on purpose with NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS."
    ]
