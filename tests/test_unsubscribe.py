"""One-click unsubscribe (RFC 8058): the headers on the wire, the POST a mail client makes,
the page a person sees, and tokens that are forged or altered."""

from __future__ import annotations

import logging
import re

import pytest
from django.core import mail
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone

from notifications.api import preferences, run_tick, schedule, set_preference
from notifications.content import links
from notifications.models import Preference

CATEGORIES = {
    "billing": {"label": "Invoices", "default": "required"},
    "news": {"label": "Product news", "default": "on"},
}
NOW = timezone.now().replace(microsecond=0)
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("categories")]


@pytest.fixture
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def email(**fields):
    fields.setdefault("email_to", "ada@example.com")
    fields.setdefault("body", "Hello")
    return schedule(channels=["email"], subject="Hi", fire_at=NOW, **fields)


def one_click(url: str, client: Client | None = None):
    """What a mail client does: a POST of the RFC 8058 body, no cookie, no CSRF token."""
    client = client or Client(enforce_csrf_checks=True)
    path = url.removeprefix("https://example.com")
    return client.post(path, "List-Unsubscribe=One-Click", content_type="application/x-www-form-urlencoded")


def unsubscribe_link(message) -> str:
    (link,) = re.findall(r"<(https://[^>]+)>", message["List-Unsubscribe"])
    return link


def test_mail_through_a_real_smtp_server_carries_both_headers_and_one_click_unsubscribes(smtp):
    email(recipient="user:42", category="news")

    run_tick(now=NOW)

    message = smtp.delivered[0].message
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    link = unsubscribe_link(message)
    assert link.startswith("https://example.com/notifications/unsubscribe/")

    client = Client(enforce_csrf_checks=True)
    response = one_click(link, client)

    assert response.status_code == 200
    assert not response.cookies  # nothing set, nothing needed
    assert preferences("user:42")["news"] == {"email": False, "webhook": True, "inbox": True}
    assert one_click(link, client).status_code == 200  # again: nothing more changes
    assert Preference.objects.count() == 1

    email(recipient="user:42", category="news")
    run_tick(now=NOW)
    assert len(smtp.delivered) == 1  # the next one is skipped


def test_required_and_uncategorised_mail_carries_no_unsubscribe_header():
    email(recipient="user:1", category="billing")
    email(recipient="user:1")

    run_tick(now=NOW)

    assert [m.extra_headers.get("List-Unsubscribe") for m in mail.outbox] == [None, None]


@override_settings(NOTIFICATIONS_UNSUBSCRIBE_MAILTO="unsubscribe@example.com")
def test_a_mailto_alternative_where_the_site_names_an_address():
    email(category="news")  # no recipient: the address is the key

    run_tick(now=NOW)

    header = mail.outbox[0].extra_headers["List-Unsubscribe"]
    https = r"<https://example\.com/notifications/unsubscribe/[^>]+/>"
    mailto = r"<mailto:unsubscribe@example\.com\?subject=unsubscribe%20[^>]+>"
    assert re.fullmatch(f"{https}, {mailto}", header)
    assert one_click(unsubscribe_link(mail.outbox[0].extra_headers)).status_code == 200
    assert preferences("ada@example.com")["news"]["email"] is False


def test_templates_see_unsubscribe_url_and_preferences_url():
    email(recipient="user:7", category="news", body="Stop: {{ unsubscribe_url }} Choose: {{ preferences_url }}")

    run_tick(now=NOW)

    (sent,) = mail.outbox
    unsubscribe, centre = re.fullmatch(r"Stop: (\S+) Choose: (\S+)", sent.body).groups()
    assert unsubscribe == unsubscribe_link(sent.extra_headers)
    assert centre.startswith("https://example.com/notifications/preferences/")


def test_a_get_shows_a_confirm_button_and_changes_nothing(client):
    url = links.unsubscribe_url("user:1", "news")

    response = client.get(url.removeprefix("https://example.com"))

    assert response.status_code == 200
    assert b'name="List-Unsubscribe" value="One-Click"' in response.content
    assert b"Product news" in response.content
    assert not Preference.objects.exists()


@pytest.mark.parametrize("change", ["forged", "altered", "other purpose", "garbage"])
def test_a_forged_or_altered_token_is_404_and_changes_nothing(change, caplog):
    token = links.unsubscribe_token("user:1", "news")
    bad = {
        "forged": links.signing.dumps({"r": "user:1", "c": "news"}, salt="something else"),
        "altered": token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB"),
        "other purpose": links.preferences_token("user:1"),
        "garbage": "not-a-token",
    }[change]
    caplog.set_level(logging.DEBUG)

    response = one_click(f"/notifications/unsubscribe/{bad}/")

    assert response.status_code == 404
    assert not Preference.objects.exists()
    assert bad not in caplog.text  # tokens stay out of the log


def test_a_post_without_the_one_click_body_is_refused():
    url = links.unsubscribe_url("user:1", "news").removeprefix("https://example.com")
    response = Client().post(url, {"something": "else"})
    assert response.status_code == 400
    assert not Preference.objects.exists()


def test_a_category_that_became_required_is_not_turned_off():
    url = links.unsubscribe_url("user:1", "billing")
    assert one_click(url).status_code == 200
    assert not Preference.objects.exists()


def test_categories_without_a_public_url_are_a_check_warning():
    from django.core.checks import WARNING, run_checks

    with override_settings(NOTIFICATIONS_PUBLIC_URL=""):
        assert [(m.id, m.level) for m in run_checks() if m.id == "notifications.W041"] == [
            ("notifications.W041", WARNING)
        ]
    with override_settings(NOTIFICATIONS_PUBLIC_URL="http://example.com"):
        assert "notifications.W041" in [m.id for m in run_checks()]
    with override_settings(NOTIFICATIONS_CATEGORIES={"x": {"default": "maybe"}}):
        assert "notifications.E040" in [m.id for m in run_checks()]
    assert not [m for m in run_checks() if m.id.startswith(("notifications.E04", "notifications.W04"))]


def test_the_unsubscribe_is_seen_by_set_preference_as_email_only():
    set_preference("user:1", "news", True)
    one_click(links.unsubscribe_url("user:1", "news"))
    assert preferences("user:1")["news"] == {"email": False, "webhook": True, "inbox": True}


def test_runtick_never_logs_a_token(capsys, caplog):
    caplog.set_level(logging.DEBUG)
    email(recipient="user:1", category="news")
    call_command("runtick")
    token = links.unsubscribe_token("user:1", "news")
    assert token.split(":")[0] not in caplog.text + capsys.readouterr().out


def test_a_client_that_posts_the_body_without_a_form_type_unsubscribes_too():
    path = links.unsubscribe_url("user:1", "news").removeprefix("https://example.com")
    response = Client().post(path, "List-Unsubscribe=One-Click", content_type="text/plain")
    assert response.status_code == 200
    assert preferences("user:1")["news"]["email"] is False


def test_an_address_is_one_recipient_however_it_is_spelled():
    set_preference("Ada@Example.COM", "news", False)
    assert preferences("ada@example.com")["news"]["email"] is False
    email(category="news", email_to="ADA@example.com")
    run_tick(now=NOW)
    assert mail.outbox == []
