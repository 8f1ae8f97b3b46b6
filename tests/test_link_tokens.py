"""The tokens of unsubscribe and preference links are opaque: a mail forwarded to a list
tells its readers nothing of the site's id for the person, and the link still works, signed
(a changed character is a 404 that changes nothing). Links in mails already sent, with the
readable tokens of earlier versions, keep working; so do links across a SECRET_KEY rotation
while the old key is a fallback."""

from __future__ import annotations

import base64
import binascii

import pytest
from django.core import signing
from django.test import Client, override_settings

from notifications.api import preferences
from notifications.content import links
from notifications.models import Preference

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("categories")]

CATEGORIES = {"news": {"label": "Product news", "default": "on"}}
RECIPIENT = "user:42"


@pytest.fixture
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def decoded(token: str) -> bytes:
    """Every part of `token` as base64 would read it (what anyone holding the link can do)."""
    found = b""
    for part in token.split(":"):
        for candidate in (part, part.lstrip(".")):
            try:
                found += base64.urlsafe_b64decode(candidate + "=" * (-len(candidate) % 4))
            except (binascii.Error, ValueError):
                continue
    return found


def one_click(token: str):
    return Client(enforce_csrf_checks=True).post(
        f"/notifications/unsubscribe/{token}/",
        "List-Unsubscribe=One-Click",
        content_type="application/x-www-form-urlencoded",
    )


@pytest.mark.parametrize("token", ["unsubscribe", "preferences"])
def test_a_token_does_not_tell_the_recipient_or_the_category(token):
    value = links.unsubscribe_token(RECIPIENT, "news") if token == "unsubscribe" else links.preferences_token(RECIPIENT)
    assert RECIPIENT.encode() not in decoded(value)
    assert b"42" not in decoded(value) and b"news" not in decoded(value)
    assert RECIPIENT not in value


def test_the_opaque_link_still_unsubscribes_its_recipient():
    assert one_click(links.unsubscribe_token(RECIPIENT, "news")).status_code == 200
    assert preferences(RECIPIENT)["news"]["email"] is False


def test_one_recipient_and_category_give_one_link_and_others_another():
    token = links.unsubscribe_token(RECIPIENT, "news")
    assert links.unsubscribe_token(RECIPIENT, "news") == token  # a retried message carries the same link
    assert links.unsubscribe_token("user:43", "news") != token


def altered(token: str, at: int) -> str:
    swap = "A" if token[at] != "A" else "B"
    return token[:at] + swap + token[at + 1 :]


@pytest.mark.parametrize("where", ["start", "middle of the sealed value", "signature", "separator"])
def test_an_altered_opaque_token_is_404_and_changes_nothing(where):
    token = links.unsubscribe_token(RECIPIENT, "news")
    assert RECIPIENT.encode() not in decoded(token)  # the new, opaque format
    at = {"start": 0, "middle of the sealed value": token.index(":") // 2, "signature": -5, "separator": 0}[where]
    bad = token.replace(":", "") if where == "separator" else altered(token, at % len(token))

    assert one_click(bad).status_code == 404
    assert Client().get(f"/notifications/preferences/{links.preferences_token(RECIPIENT)[:-1]}/").status_code == 404
    assert not Preference.objects.exists()


def test_a_readable_token_of_an_earlier_version_still_works():
    sent_before = signing.dumps({"r": RECIPIENT, "c": "news"}, salt=links.UNSUBSCRIBE_SALT, compress=True)
    assert one_click(sent_before).status_code == 200
    assert preferences(RECIPIENT)["news"]["email"] is False
    centre = signing.dumps({"r": RECIPIENT}, salt=links.PREFERENCES_SALT, compress=True)
    assert Client().get(f"/notifications/preferences/{centre}/").status_code == 200


def test_links_survive_a_key_rotation_while_the_old_key_is_a_fallback(settings):
    token = links.unsubscribe_token(RECIPIENT, "news")
    old = settings.SECRET_KEY
    with override_settings(SECRET_KEY="a new key " + "x" * 50, SECRET_KEY_FALLBACKS=[old]):
        assert links.read_unsubscribe(token) == (RECIPIENT, "news")
    with override_settings(SECRET_KEY="a new key " + "x" * 50, SECRET_KEY_FALLBACKS=[]):
        assert links.read_unsubscribe(token) is None
        assert one_click(token).status_code == 404
    assert not Preference.objects.exists()


def test_a_token_of_one_purpose_opens_nothing_of_the_other():
    assert links.read_preferences(links.unsubscribe_token(RECIPIENT, "news")) is None
    assert links.read_unsubscribe(links.preferences_token(RECIPIENT)) is None
