"""The inbox's web settings: known to W005, and each bad value a warning (W051-W053) that
stops nothing; the rules behind them (an origin as a browser sends it, a message's link)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from notifications.checks.settings import check_unknown_settings
from notifications.conf import inbox_allowed_origins, inbox_poll_seconds
from notifications.inbox.web.checks import check_inbox_web
from notifications.rules.inbox_links import is_message_link
from notifications.rules.origins import origin_problem


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_the_inbox_settings_are_known(settings):
    settings.NOTIFICATIONS_INBOX_RECIPIENT = "notifications.inbox.web.recipient.signed_in_user"
    settings.NOTIFICATIONS_INBOX_POLL_SECONDS = 10
    settings.NOTIFICATIONS_INBOX_ALLOWED_ORIGINS = ["https://app.example.com"]
    settings.NOTIFICATIONS_INBOX_RETENTION_DAYS = 30
    assert "notifications.W005" not in ids(check_unknown_settings())
    assert check_inbox_web() == []


def test_malformed_origins_are_a_warning_and_allow_nothing(settings):
    settings.NOTIFICATIONS_INBOX_ALLOWED_ORIGINS = ["https://ok.example", "http://plain.example", "*",
                                                    "https://slash.example/"]  # fmt: skip
    messages = check_inbox_web()
    assert ids(messages) == ["notifications.W051"] * 3
    assert [m.level for m in messages] == [30] * 3  # warnings: nothing else stops
    assert "'http://plain.example', which is not an https:// origin; it allows nothing." in messages[0].msg
    assert inbox_allowed_origins() == {"https://ok.example"}
    call_command("check")  # exits 0: a warning


def test_origins_that_are_not_a_list(settings):
    settings.NOTIFICATIONS_INBOX_ALLOWED_ORIGINS = "https://app.example.com"
    assert ids(check_inbox_web()) == ["notifications.W051"]
    assert inbox_allowed_origins() == frozenset()


@pytest.mark.parametrize("path", ["no.such.module.function", "notifications.conf.MAXIMUMS", 42])
def test_a_recipient_function_that_is_not_one(settings, path):
    settings.NOTIFICATIONS_INBOX_RECIPIENT = path
    assert ids(check_inbox_web()) == ["notifications.W052"]


@pytest.mark.parametrize("value", [0, -5, "30", None, 10**9])
def test_poll_seconds_that_are_not_usable(settings, value):
    settings.NOTIFICATIONS_INBOX_POLL_SECONDS = value
    assert ids(check_inbox_web()) == ["notifications.W053"]
    assert inbox_poll_seconds() == 30


@pytest.mark.parametrize(
    "value, problem",
    [
        ("https://app.example.com", None),
        ("https://app.example.com:8443", None),
        ("https://[::1]:8443", None),
        ("https://app.example.com:443", "is not spelt as a browser sends it"),
        ("https://App.Example.com", "is not spelt as a browser sends it"),
        ("https://app.example.com/", "is not spelt as a browser sends it"),
        ("https://app.example.com/path", "is not spelt as a browser sends it"),
        ("http://app.example.com", "is not an https:// origin"),
        ("https://user@app.example.com", "has no host, or has a user name"),
        ("https://", "has no host, or has a user name"),
        ("https://app.example.com:99999", "is not a URL"),
        ("*", "is a wildcard"),
        (None, "is a NoneType, not a string"),
    ],
)
def test_an_origin_as_a_browser_sends_it(value, problem):
    found = origin_problem(value)
    assert (found is None) if problem is None else found.startswith(problem)


@pytest.mark.parametrize(
    "value, link",
    [
        ("/orders/7", True),
        ("/", True),
        ("https://shop.example/o/7", True),
        ("http://shop.example", True),
        ("//evil.example/x", False),
        ("/\\evil.example", False),
        ("javascript:alert(1)", False),
        ("data:text/html,x", False),
        ("https://", False),
        ("orders/7", False),
        ("/a b", False),
        ("/a\nb", False),
        ("/a\\\\b", False),
        ("/a\u2028b", False),
        ("", False),
        (None, False),
    ],
)
def test_which_urls_are_links(value, link):
    assert is_message_link(value) is link
