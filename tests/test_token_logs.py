"""A signed link's token never reaches a log by a request to it (issue 45 #11): Django's
`django.request` (a 400 without the one-click body), `django.security.csrf` (a 403 on the
preference centre's form) and runserver's `django.server` lines name the page, not the token."""

from __future__ import annotations

import logging

import pytest
from django.test import Client, override_settings

from notifications.content import links
from notifications.recipients.logs import REDACTED

CATEGORIES = {"news": {"label": "Product news", "default": "on"}}
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("categories")]


@pytest.fixture
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def path_of(url: str) -> str:
    return url.removeprefix("https://example.com")


def token_of(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[1]


def logged(caplog) -> str:
    """Every record as a handler would write it: message, arguments and the request's repr."""
    return "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in caplog.records)


def test_a_bad_one_click_post_logs_its_400_without_the_token(caplog):
    path = path_of(links.unsubscribe_url("ada@example.com", "news"))
    caplog.set_level(logging.DEBUG)
    answer = Client().post(path, "something else", content_type="text/plain")
    assert answer.status_code == 400
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    assert record.getMessage() == f"Bad Request: {path.replace(token_of(path), REDACTED)}"
    assert token_of(path) not in logged(caplog)


def test_a_preference_form_without_its_csrf_token_logs_its_403_without_the_token(caplog):
    path = path_of(links.preferences_url("ada@example.com"))
    caplog.set_level(logging.DEBUG)
    answer = Client(enforce_csrf_checks=True).post(path, {"news:email": "on"})
    assert answer.status_code == 403
    assert any(r.name == "django.security.csrf" for r in caplog.records)
    assert REDACTED in logged(caplog)
    assert token_of(path) not in logged(caplog)


def test_a_request_line_of_the_development_server_is_redacted(caplog):
    path = path_of(links.unsubscribe_url("ada@example.com", "news"))
    caplog.set_level(logging.DEBUG)
    logging.getLogger("django.server").info('"%s" %s %s', f"GET {path}?x=1 HTTP/1.1", "200", "512")
    assert token_of(path) not in logged(caplog)
    assert f"GET {path.replace(token_of(path), REDACTED)}?x=1" in logged(caplog)


def test_other_paths_are_logged_as_they_are(caplog):
    caplog.set_level(logging.DEBUG)
    Client().get("/no/such/page/abc:def/")
    logging.getLogger("django.request").warning("Not Found: %s", "/no/such/page/abc:def/")
    assert "/no/such/page/abc:def/" in logged(caplog)
