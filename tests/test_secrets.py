"""Signing secrets: rotation, the row secret's shape, and that no secret ever leaks."""

from __future__ import annotations

import base64
import io
import logging
import socket

import pytest
import standardwebhooks
from django.contrib.auth.models import Permission, User
from django.core import checks
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels.webhook import guard
from notifications.models import DeliveryAttempt, Notification
from notifications.rules.secrets import decode_key, secret_errors
from tests.support.admin_forms import change_form, change_url
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db


def secret_of(key: bytes) -> str:
    return "whsec_" + base64.b64encode(key).decode()


NEW = secret_of(b"the new site key, 32 bytes long!")
OLD = secret_of(b"the old site key, 32 bytes long!")
ROW = secret_of(b"a row's own key, 32 bytes long!!")
STRANGER = secret_of(b"nobody's key at all, 32 bytes!!!")


def verifies(secret: str, received) -> bool:
    try:
        standardwebhooks.Webhook(secret).verify(received.body, received.headers)
    except standardwebhooks.WebhookVerificationError:
        return False
    return True


# --- the format (notifications.rules.secrets: one definition for validation, checks, signing, receiving) ---


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        (NEW, None),
        (NEW.removeprefix("whsec_"), "A webhook secret starts with 'whsec_'."),
        ("whsec_not base64!", "A webhook secret is 'whsec_' followed by base64."),
        ("whsec_é", "A webhook secret is 'whsec_' followed by base64."),
        (secret_of(b"23 bytes is one too few"), "A webhook secret must hold at least 24 bytes."),
    ],
)
def test_a_secret_is_the_prefix_and_base64_of_24_bytes_or_more(secret, problem):
    assert secret_errors(secret) == ([problem] if problem else [])


def test_strict_decoding_refuses_what_lenient_decoding_skips():
    key = b"the new site key, 32 bytes long!"
    assert decode_key(NEW) == key == decode_key(NEW.removeprefix("whsec_"))
    spaced = NEW[:12] + " " + NEW[12:]
    with pytest.raises(ValueError):
        decode_key(spaced)
    assert decode_key(spaced, strict=False) == key  # as the standardwebhooks package reads it


# --- rotation -------------------------------------------------------------------------------------


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET=[NEW, "", OLD])
def test_every_listed_site_key_signs_and_each_verifies(webhook_server):
    schedule(channels=["webhook"], webhook_url=webhook_server.url())
    run_tick()
    (received,) = webhook_server.received

    signatures = received.headers["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    assert verifies(NEW, received)
    assert verifies(OLD, received)
    assert not verifies(STRANGER, received)


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET=[NEW, OLD])
def test_a_rows_own_secret_replaces_the_site_keys(webhook_server):
    schedule(channels=["webhook"], webhook_url=webhook_server.url(), webhook_secret=ROW)
    run_tick()
    (received,) = webhook_server.received

    assert len(received.headers["webhook-signature"].split(" ")) == 1
    assert verifies(ROW, received)
    assert not verifies(NEW, received)
    assert not verifies(OLD, received)


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET="")
def test_without_any_key_nothing_unsigned_is_sent(webhook_server):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url())
    report = run_tick()
    row.refresh_from_db()
    assert report.counts()["deferred"] == 1  # held for the key (tests/test_configuration_hold.py)
    assert row.error_count == 0
    assert webhook_server.received == []


# --- the row secret's shape ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (secret_of(b"x" * 23), "A webhook secret must hold at least 24 bytes."),
        (base64.b64encode(b"x" * 32).decode(), "A webhook secret starts with 'whsec_'."),
        ("whsec_not*base64*at*all", "A webhook secret is 'whsec_' followed by base64."),
        ("whsec_", "A webhook secret must hold at least 24 bytes."),
    ],
)
def test_a_malformed_row_secret_is_refused_without_echoing_it(secret, message):
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url="https://example.com/hook", webhook_secret=secret)
    assert caught.value.message_dict["webhook_secret"] == [message]
    if len(secret) > len("whsec_"):
        assert secret not in str(caught.value)
        assert secret.removeprefix("whsec_") not in str(caught.value)


def test_a_24_byte_secret_is_accepted():
    assert schedule(channels=["webhook"], webhook_url="https://example.com/hook", webhook_secret=secret_of(b"y" * 24))


# --- never leaked -----------------------------------------------------------------------------------

# Canaries: secrets whose text is easy to spot wherever it might land.
CANARY_KEY = b"CANARY-ROW-KEY-0123456789-abcdef"
CANARY = secret_of(CANARY_KEY)
BROKEN_ROW = "whsec_CANARYBROKENROW*!*"
BROKEN_SITE = "whsec_CANARYBROKENSITE*!*"


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        body = secret.removeprefix("whsec_")
        assert body not in text, f"secret {body[:8]}... leaked"
        for key in (CANARY_KEY.decode(), "CANARYBROKEN"):
            assert key not in text, f"{key[:8]}... leaked"


def test_secrets_never_appear_in_errors_logs_rows_records_exceptions_or_admin(
    webhook_server, caplog, client, admin_user, monkeypatch
):
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    # Every failure path a row with a secret can take.
    webhook_server.responder = lambda request: Reply(
        status=int(request.path.rsplit("/", 1)[1]), body=b"error page", headers={"Retry-After": "1"}
    )
    monkeypatch.setattr(
        guard,
        "getaddrinfo",
        lambda host, port, *a: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port))],
    )
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    rows = [
        schedule(channels=["webhook"], webhook_url=webhook_server.url(f"/hook/{status}"), webhook_secret=CANARY)
        for status in (500, 410, 429, 302)
    ]
    rows.append(schedule(channels=["webhook"], webhook_url="http://intranet.example.test/", webhook_secret=CANARY))
    rows.append(schedule(channels=["webhook"], webhook_url=f"http://127.0.0.1:{closed_port}/", webhook_secret=CANARY))
    # A secret that never passed validation (raw SQL): dead-lettered with a reason, no echo.
    rows += Notification.objects.bulk_create(
        [
            Notification(
                channels=["webhook"],
                webhook_url=webhook_server.url("/hook/200"),
                webhook_secret=BROKEN_ROW,
                next_fire_at=timezone.now(),
            )
        ]
    )
    out = io.StringIO()
    call_command("runtick", verbosity=2, stdout=out, stderr=out)
    seen.append(out.getvalue())

    # A broken site secret: the tick carries on, the error names the setting only.
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=[BROKEN_SITE]):
        site_row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/hook/200"))
        report = run_tick()
        assert report.counts()["deferred"] == 1  # held, named by the setting only
        seen.append(report.summary())
        seen += [str(m) + str(m.hint) for m in checks.run_checks()]
    rows.append(site_row)

    # Validation errors from every entry point.
    for bad in (BROKEN_ROW, CANARY[:-1], CANARY.removeprefix("whsec_")):
        with pytest.raises(ValidationError) as caught:
            schedule(channels=["webhook"], webhook_url="https://example.com/", webhook_secret=bad)
        seen += [str(caught.value), repr(caught.value), str(caught.value.message_dict)]

    errors = {}
    for row in rows:
        row.refresh_from_db()
        errors[row.pk] = row.last_error
        seen.append(f"{row} {row.last_error}")
    seen += [f"{a} {a.error} {a.error_class}" for a in DeliveryAttempt.objects.all()]

    client.force_login(admin_user)
    for url in ("/admin/notifications/notification/", "/admin/notifications/deliveryattempt/"):
        page = client.get(url)
        assert page.status_code == 200
        seen.append(page.content.decode())
    for state in ("due", "scheduled", "retrying", "partial", "dead"):
        seen.append(client.get("/admin/notifications/notification/", {"state": state}).content.decode())

    seen.append(caplog.text)
    seen += [str(record.args) for record in caplog.records]

    # The paths were really taken...
    assert "webhook: HTTP 500" in errors.values()
    assert "webhook: blocked address" in errors.values()
    assert "webhook: connection refused" in errors.values()
    assert any((e or "").startswith("invalid: webhook_secret:") for e in errors.values())
    assert webhook_server.received  # ...and requests went out signed with the canary
    # ...and not one of them shows a secret.
    assert_no_secret("\n".join(seen), CANARY, BROKEN_ROW, BROKEN_SITE)
    for received in webhook_server.received:
        assert_no_secret(received.body.decode() + str(received.headers), CANARY)


# --- the admin, for every permission ------------------------------------------------------------

CHANGELIST = "/admin/notifications/notification/"


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, f"{username}@example.com", "pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="notifications", codename__in=codenames)
    )
    return user


def admin_pages(client, rows: list[Notification], *, can_change: bool) -> dict[str, object]:
    """Every admin page a row's secret could reach, for the logged-in user."""
    pages: dict[str, object] = {
        "list": client.get(CHANGELIST),
        "search whsec_": client.get(CHANGELIST, {"q": "whsec_"}),
        "search key": client.get(CHANGELIST, {"q": CANARY.removeprefix("whsec_")[:12]}),
    }
    for row in rows:
        pages[f"change {row.pk}"] = client.get(change_url(row))
        pages[f"history {row.pk}"] = client.get(reverse("admin:notifications_notification_history", args=[row.pk]))
    if can_change:
        pages["add"] = client.get(reverse("admin:notifications_notification_add"))
        secret_row = rows[0]
        # Error re-renders of the form: an invalid edit, and an invalid rotation.
        url = change_url(secret_row)
        for name, changes in {
            "bad edit": {"channels": []},
            "bad rotation": {"webhook_secret": "whsec_c2hvcnQ="},
        }.items():
            response = client.post(url, change_form(secret_row, **changes))
            assert response.status_code == 200, name  # the form again, with the error
            assert "webhook_secret" not in response.context["adminform"].form.initial
            pages[name] = response
        assert "webhook_secret" not in pages[f"change {secret_row.pk}"].context["adminform"].form.initial
    return pages


@pytest.mark.parametrize("who", ["view-only", "change", "superuser"])
def test_no_admin_page_shows_a_rows_secret_whatever_the_permission(client, who):
    with_secret = schedule(channels=["webhook"], webhook_url="https://example.com/hook", webhook_secret=CANARY)
    without = schedule(channels=["webhook"], webhook_url="https://example.com/other")
    # A history entry for each row, as an earlier edit by someone else leaves it.
    editor = User.objects.create_superuser("editor", "editor@example.com", "pw")
    client.force_login(editor)
    for row in (with_secret, without):
        url = change_url(row)
        assert client.post(url, change_form(row, subject="edited")).status_code == 302
    with_secret.refresh_from_db()
    assert with_secret.webhook_secret == CANARY  # the edit kept it

    user = {
        "view-only": lambda: staff("viewer", "view_notification"),
        "change": lambda: staff("changer", "view_notification", "change_notification", "add_notification"),
        "superuser": lambda: User.objects.create_superuser("root", "root@example.com", "pw"),
    }[who]()
    client.force_login(user)
    pages = admin_pages(client, [with_secret, without], can_change=who != "view-only")

    for name, page in pages.items():
        assert page.status_code == 200, name
        html = page.content.decode()
        assert_no_secret(html, CANARY)
        assert CANARY not in html, name
    # Everyone sees whether a row has a secret of its own, and nothing more.
    assert '<div class="readonly">set</div>' in pages[f"change {with_secret.pk}"].content.decode()
    assert '<div class="readonly">not set</div>' in pages[f"change {without.pk}"].content.decode()
    change_page = pages[f"change {with_secret.pk}"].content.decode()
    if who == "view-only":
        assert 'type="password"' not in change_page
        assert "clear_webhook_secret" not in change_page
    else:
        # Write-only input to set or rotate, and the box to remove it.
        assert 'type="password"' in change_page
        assert 'name="clear_webhook_secret"' in change_page
        assert 'name="clear_webhook_secret"' not in pages[f"change {without.pk}"].content.decode()


def test_a_view_only_user_cannot_change_or_read_the_secret_by_posting(client):
    row = schedule(channels=["webhook"], webhook_url="https://example.com/hook", webhook_secret=CANARY)
    client.force_login(staff("viewer", "view_notification"))
    url = change_url(row)
    response = client.post(url, change_form(row, webhook_secret=ROW, clear_webhook_secret="on"))
    assert response.status_code == 403
    assert_no_secret(response.content.decode(), CANARY)
    row.refresh_from_db()
    assert row.webhook_secret == CANARY
