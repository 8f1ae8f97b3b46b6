"""NOTIFICATIONS_PUBLIC_URL, the origin unsubscribe links are built on, never stops the rest:
unset (with categories), http or malformed is a warning (W041) and only the mail that needs
its links is held; while DEBUG is on, http://localhost and http://127.0.0.1 (any port) are
accepted with a warning (W043), so the one-click POST can be tried against runserver."""

from __future__ import annotations

import re

import pytest
from django.core import checks, mail
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone

from notifications.api import preferences, run_tick, schedule
from notifications.models import Notification, TickRun

pytestmark = pytest.mark.django_db

CATEGORIES = {
    "billing": {"label": "Invoices", "default": "required"},
    "news": {"label": "Product news", "default": "on"},
}
HTTP = "email: NOTIFICATIONS_PUBLIC_URL is http://, and mail clients ignore a link that is not https"


def url_messages() -> list[tuple[str, int]]:
    """(id, level) of every check message about the categories and the public URL."""
    found = checks.run_checks()
    return [(m.id, m.level) for m in found if m.id and m.id.startswith(("notifications.E04", "notifications.W04"))]


@pytest.mark.parametrize(
    ("url", "debug", "expected"),
    [
        ("https://example.com", False, []),
        ("https://example.com:8443/", False, []),
        ("", False, [("notifications.W041", checks.WARNING)]),
        ("http://example.com", False, [("notifications.W041", checks.WARNING)]),
        ("http://example.com", True, [("notifications.W041", checks.WARNING)]),
        ("http://127.0.0.1:8000", False, [("notifications.W041", checks.WARNING)]),
        ("http://127.0.0.1:8000", True, [("notifications.W043", checks.WARNING)]),
        ("http://localhost", True, [("notifications.W043", checks.WARNING)]),
        ("http://localhost.example.com:8000", True, [("notifications.W041", checks.WARNING)]),
        ("https://example.com/notifications", False, [("notifications.W041", checks.WARNING)]),
        ("example.com", False, [("notifications.W041", checks.WARNING)]),
        ("https://example.com:port", False, [("notifications.W041", checks.WARNING)]),
    ],
)
def test_a_public_url_that_builds_no_https_link_is_a_warning_never_an_error(url, debug, expected):
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL=url, DEBUG=debug):
        assert url_messages() == expected


def test_the_warnings_say_what_is_held_and_how_to_try_links_locally():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="http://example.com"):
        (warning,) = [m for m in checks.run_checks() if m.id == "notifications.W041"]
    assert warning.msg == (
        "NOTIFICATIONS_PUBLIC_URL is http://, and mail clients ignore a link that is not https: email of a "
        "category that is not required is held (not sent, no retry spent) until it is fixed; every other row is sent."
    )
    assert "http://127.0.0.1:8000" in warning.hint and "DEBUG" in warning.hint
    loopback = {"NOTIFICATIONS_PUBLIC_URL": "http://127.0.0.1:8000", "DEBUG": True}
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, **loopback):
        (development,) = [m for m in checks.run_checks() if m.id == "notifications.W043"]
    assert development.msg.startswith("NOTIFICATIONS_PUBLIC_URL is http://127.0.0.1:8000: unsubscribe and preference")


def test_a_public_url_without_categories_is_only_checked_when_set():
    with override_settings(NOTIFICATIONS_CATEGORIES={}, NOTIFICATIONS_PUBLIC_URL=""):
        assert url_messages() == []
    with override_settings(NOTIFICATIONS_CATEGORIES={}, NOTIFICATIONS_PUBLIC_URL="http://example.com"):
        assert url_messages() == [("notifications.W041", checks.WARNING)]


def mail_of(category: str = "", **fields):
    return schedule(
        channels=["email"],
        email_to=fields.pop("email_to", "ada@example.com"),
        subject="Hi",
        body="Hello",
        recipient="user:42",
        category=category,
        **fields,
    )


@override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="http://example.com")
def test_runtick_with_an_http_public_url_sends_the_rest_and_holds_the_mail_that_needs_its_links(capsys):
    plain = mail_of(email_to="plain@example.com")
    required = mail_of("billing", email_to="billing@example.com")
    news = mail_of("news", email_to="news@example.com")

    call_command("runtick")  # its system checks stop nothing

    summary, held = capsys.readouterr().out.splitlines()
    assert "claimed=3 succeeded=2 " in summary and " deferred=1 " in summary
    assert f" 1 held: {HTTP} (notifications.W041) (this process's settings;" in held
    assert sorted(m.to[0] for m in mail.outbox) == ["billing@example.com", "plain@example.com"]
    assert TickRun.objects.latest().held == f"1 held: {HTTP} (notifications.W041)"
    assert not Notification.objects.filter(pk__in=[plain.pk, required.pk]).exists()
    news.refresh_from_db()
    assert news.error_count == 0 and news.claimed_until is None  # no retry spent

    mail.outbox.clear()
    with override_settings(NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        run_tick(now=news.next_fire_at)  # fixing the setting releases it
    (sent,) = mail.outbox
    assert sent.to == ["news@example.com"]
    assert sent.extra_headers["List-Unsubscribe"].startswith("<https://example.com/notifications/unsubscribe/")


@override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="")
def test_the_admin_and_notifications_status_say_why_the_mail_waits(admin_client, capsys):
    from django.core.management import CommandError

    news = mail_of("news")
    run_tick(now=timezone.now())

    listing = admin_client.get("/admin/notifications/notification/").content.decode()
    assert "held: email: NOTIFICATIONS_PUBLIC_URL is not set (notifications.W041)" in listing
    with pytest.raises(CommandError, match="Email with unsubscribe links is held"):
        call_command("notifications_status", "--stale-after", "1000d")
    assert "1 row waits for the links it must carry" in capsys.readouterr().out
    assert Notification.objects.filter(pk=news.pk).exists()


@override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="http://127.0.0.1:8000", DEBUG=True)
def test_while_debug_is_on_a_loopback_origin_sends_http_links_that_work():
    mail_of("news")

    run_tick(now=timezone.now())

    (sent,) = mail.outbox
    (link,) = re.findall(r"<([^>]+)>", sent.extra_headers["List-Unsubscribe"])
    assert link.startswith("http://127.0.0.1:8000/notifications/unsubscribe/")
    assert sent.extra_headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert "notifications.W043" in [m.id for m in checks.run_checks()]

    response = Client(enforce_csrf_checks=True).post(
        link.removeprefix("http://127.0.0.1:8000"),
        "List-Unsubscribe=One-Click",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200
    assert preferences("user:42")["news"]["email"] is False
