"""The links a message gives its recipient: one-click unsubscribe (RFC 8058) and the
preference centre, signed so the link itself is the key.

Tokens are opaque (`notifications.content.tokens`: encrypted, then signed with a salt per
purpose): an unsubscribe token holds a recipient and a category, a preferences token a
recipient, and neither says either to whoever reads the link (a mail forwarded to a list).
One never validates for the other, and a changed character fails. They do not expire (a
mail client may POST months later); rotating SECRET_KEY (with SECRET_KEY_FALLBACKS for a
while) ends them. The readable tokens of earlier versions, in mails already sent, are still
read (`_legacy`), and no longer made.

Links are built on NOTIFICATIONS_PUBLIC_URL (`notifications.rules.public_url`): a cron tick
has no request to take the host from. Without a usable one, or without `notifications.urls`
in the site's URLconf, there are none; the email channel holds the mail that needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.core import signing
from django.urls import NoReverseMatch, reverse

from notifications.conf import app_settings, categories, public_url
from notifications.content import tokens

UNSUBSCRIBE_SALT = "notifications.unsubscribe"
PREFERENCES_SALT = "notifications.preferences"
ONE_CLICK = "List-Unsubscribe=One-Click"  # RFC 8058's POST body, and its header's value


def unsubscribe_token(recipient: str, category: str) -> str:
    return tokens.seal({"r": recipient, "c": category}, UNSUBSCRIBE_SALT)


def preferences_token(recipient: str) -> str:
    return tokens.seal({"r": recipient}, PREFERENCES_SALT)


def read_unsubscribe(token: str) -> tuple[str, str] | None:
    """(recipient, category) of a valid unsubscribe token; None for anything else."""
    value = _load(token, UNSUBSCRIBE_SALT)
    if value is None or not isinstance(value.get("c"), str):
        return None
    return value["r"], value["c"]


def read_preferences(token: str) -> str | None:
    """The recipient of a valid preferences token; None for anything else."""
    value = _load(token, PREFERENCES_SALT)
    return None if value is None else value["r"]


def _load(token: str, salt: str) -> dict[str, Any] | None:
    value = tokens.open_sealed(token, salt)
    if value is None:
        value = _legacy(token, salt)
    if not isinstance(value, dict) or not isinstance(value.get("r"), str) or not value["r"]:
        return None
    return value


def _legacy(token: str, salt: str) -> Any:
    """The value of a readable token of an earlier version (`signing.dumps`), still in mails
    already sent; None for anything else."""
    try:
        return signing.loads(token, salt=salt)
    except (signing.BadSignature, ValueError, TypeError, UnicodeError):
        return None


def needs_links(category: str) -> bool:
    """Whether mail of `category` must carry an unsubscribe link: one that is not required."""
    known = categories()
    return category in known and not known[category].required


def unbuildable(category: str) -> str | None:
    """Why mail of `category` cannot carry the links it needs now (NOTIFICATIONS_PUBLIC_URL
    builds none: notifications.W041), or None."""
    if not needs_links(category):
        return None
    return public_url().problem or None


def _public(name: str, token: str) -> str | None:
    origin = public_url().origin
    if not origin:
        return None
    try:
        path = reverse(f"notifications:{name}", args=[token])
    except NoReverseMatch:  # the site's URLconf does not include notifications.urls
        return None
    return origin + path


def unsubscribe_url(recipient: str, category: str) -> str | None:
    return _public("unsubscribe", unsubscribe_token(recipient, category))


def preferences_url(recipient: str) -> str | None:
    return _public("preferences", preferences_token(recipient))


@dataclass(frozen=True)
class Links:
    """A message's links: both None where the row has no recipient key or the site no public URL."""

    unsubscribe: str | None = None
    preferences: str | None = None
    mailto: str | None = None

    def context(self) -> dict[str, str]:
        """What templates see: `unsubscribe_url` and `preferences_url` ("" when there is none)."""
        return {"unsubscribe_url": self.unsubscribe or "", "preferences_url": self.preferences or ""}

    def headers(self) -> dict[str, str]:
        """RFC 8058's two headers, for a message with an unsubscribe link; none otherwise."""
        if not self.unsubscribe:
            return {}
        value = f"<{self.unsubscribe}>"
        if self.mailto:
            value += f", <{self.mailto}>"
        return {"List-Unsubscribe": value, "List-Unsubscribe-Post": ONE_CLICK}


def links_for(recipient: str, category: str) -> Links:
    """The links of a message to `recipient` (its key: an id, or an address) of `category`:
    a preference centre whenever there is a recipient, an unsubscribe link for a category
    that is not required."""
    if not recipient:
        return Links()
    known = categories()
    unsubscribe = mailto = None
    if category in known and not known[category].required:
        token = unsubscribe_token(recipient, category)
        unsubscribe = _public("unsubscribe", token)
        address = app_settings.UNSUBSCRIBE_MAILTO
        if unsubscribe and isinstance(address, str) and address:
            mailto = f"mailto:{address}?subject={quote('unsubscribe ' + token)}"
    return Links(unsubscribe, preferences_url(recipient) if known else None, mailto)
