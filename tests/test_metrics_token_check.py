"""A metrics token no scraper can send is refused by `manage.py check` (issue 34, finding 11).

A WSGI server decodes request headers as ISO-8859-1: a token with a character beyond
ASCII, sent as UTF-8 by any client, never compares equal. The live server shows it; the
check (notifications.E034) says so before anyone scrapes, and never shows the token.
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import pytest
from django.core import checks
from django.test.utils import override_settings

URL = "/metrics/notifications/"
NON_ASCII = "scrape-tökén-0123456789"


def token_errors() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if m.id == "notifications.E034"]


def scrape(live_server, token: str) -> int:
    """The status of a scrape with `token`, its header sent as UTF-8 bytes (as curl does)."""
    where = urlsplit(live_server.url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
    conn.putrequest("GET", URL)
    conn.putheader("Authorization", f"Bearer {token}".encode())
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.mark.django_db(transaction=True)
def test_a_non_ascii_token_never_matches_through_a_real_server(live_server):
    with override_settings(NOTIFICATIONS_METRICS_TOKEN=NON_ASCII):
        assert scrape(live_server, NON_ASCII) == 403  # the very token: refused all the same
    with override_settings(NOTIFICATIONS_METRICS_TOKEN="scrape-token-0123456789"):
        assert scrape(live_server, "scrape-token-0123456789") == 200


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        (NON_ASCII, "beyond printable ASCII"),
        ("scrape\ttoken", "beyond printable ASCII"),
        (" scrape-token ", "starts or ends with a space"),
        (b"scrape-token", "must be a string, not bytes"),
    ],
)
def test_a_token_no_request_can_match_is_an_error_that_never_shows_it(token, problem):
    with override_settings(NOTIFICATIONS_METRICS_TOKEN=token):
        errors = token_errors()
    assert len(errors) == 1
    assert problem in errors[0].msg
    assert "scrape" not in errors[0].msg and "scrape" not in (errors[0].hint or "").replace("token_urlsafe", "")


@pytest.mark.parametrize("token", ["", "scrape-token-0123456789", "Ab0-._~+/=!"])
def test_a_sendable_token_or_none_passes(token):
    with override_settings(NOTIFICATIONS_METRICS_TOKEN=token):
        assert token_errors() == []
