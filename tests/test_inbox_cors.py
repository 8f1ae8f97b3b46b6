"""Cross-origin front ends of the inbox, over real HTTP against a live server with a plain
HTTP client (no browser rules in between): the exact CORS headers for listed origins and
none for others, ETag/304 on the wire, a POST from a foreign Origin refused 403 whatever
CORS a browser would do, and a listed origin's POST checked for CSRF like one from
CSRF_TRUSTED_ORIGINS."""

from __future__ import annotations

import http.client
import json
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

import pytest
from django.test import Client

from notifications.models import InboxMessage
from tests.support.inbox_messages import add_message, recipient_of

pytestmark = pytest.mark.django_db(transaction=True)

FRONT_END = "https://app.example.com"
CORS_HEADERS = {
    "access-control-allow-origin",
    "access-control-allow-credentials",
    "access-control-expose-headers",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-max-age",
}


class Browserless:
    """One person's HTTP session with the live server: their cookies, sent by hand."""

    def __init__(self, url: str, cookies: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.cookies = dict(cookies)

    def request(self, method: str, path: str, body: bytes | None = None, **headers: str):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {k.replace("_", "-"): v for k, v in headers.items()}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            content = response.read()
        finally:
            connection.close()
        for line in response.headers.get_all("Set-Cookie") or []:
            self.cookies.update({name: morsel.value for name, morsel in SimpleCookie(line).items()})
        return response.status, {k.lower(): v for k, v in response.getheaders()}, content

    @property
    def own_origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def csrf_token(self) -> str:
        self.request("GET", "/notifications/inbox/")  # the page's forms set the csrftoken cookie
        return self.cookies["csrftoken"]


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="pw")


@pytest.fixture
def session(live_server, alice) -> Browserless:
    client = Client()
    client.force_login(alice)
    return Browserless(live_server.url, {"sessionid": client.cookies["sessionid"].value})


@pytest.fixture
def listed(settings):
    settings.NOTIFICATIONS_INBOX_ALLOWED_ORIGINS = [FRONT_END, "https://other.example:8443"]


def mark_all_read(session: Browserless, **headers: str):
    return session.request(
        "POST", "/notifications/inbox/mark", json.dumps({"ids": "all", "state": "read"}).encode(),
        Content_Type="application/json", **headers,
    )  # fmt: skip


def vary(headers: dict[str, str]) -> set[str]:
    return {value.strip().lower() for value in headers.get("vary", "").split(",")}


@pytest.mark.parametrize(
    "path", ["/notifications/inbox/counts", "/notifications/inbox/messages", "/notifications/inbox/mark"]
)
def test_a_preflight_from_a_listed_origin(session, listed, path):
    status, headers, body = session.request(
        "OPTIONS", path, Origin=FRONT_END, Access_Control_Request_Method="POST",
        Access_Control_Request_Headers="content-type, x-csrftoken",
    )  # fmt: skip
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == FRONT_END
    assert headers["access-control-allow-credentials"] == "true"
    assert "origin" in vary(headers)
    assert headers["access-control-allow-methods"] == "GET, POST"
    assert {h.strip().lower() for h in headers["access-control-allow-headers"].split(",")} >= {
        "content-type", "x-csrftoken", "if-none-match",
    }  # fmt: skip


@pytest.mark.parametrize("origin", ["https://evil.example", "https://app.example.com.evil.example", "null",
                                    "http://app.example.com", "https://APP.example.com"])  # fmt: skip
def test_no_cors_header_for_an_origin_not_listed(session, listed, origin):
    for method in ("OPTIONS", "GET"):
        _status, headers, _ = session.request(method, "/notifications/inbox/counts", Origin=origin)
        assert not CORS_HEADERS & set(headers), (method, headers)


def test_no_cors_header_by_default(session):
    status, headers, _ = session.request("OPTIONS", "/notifications/inbox/counts", Origin=FRONT_END)
    assert not CORS_HEADERS & set(headers)
    status, headers, _ = session.request("GET", "/notifications/inbox/counts", Origin=FRONT_END)
    assert status == 200 and not CORS_HEADERS & set(headers)


def test_actual_responses_to_a_listed_origin_with_etag_and_304_on_the_wire(session, listed, alice):
    add_message(recipient_of(alice))
    status, headers, body = session.request("GET", "/notifications/inbox/counts", Origin=FRONT_END)
    assert status == 200 and json.loads(body) == {"unseen": 1, "unread": 1, "total": 1}
    assert headers["access-control-allow-origin"] == FRONT_END
    assert headers["access-control-allow-credentials"] == "true"
    assert headers["access-control-expose-headers"] == "ETag"
    assert {"origin", "cookie"} <= vary(headers)
    assert "private" in headers["cache-control"] and "no-cache" in headers["cache-control"]
    etag = headers["etag"]

    status, headers, body = session.request("GET", "/notifications/inbox/counts", Origin=FRONT_END, If_None_Match=etag)
    assert status == 304 and body == b""
    assert headers["etag"] == etag and headers["access-control-allow-origin"] == FRONT_END

    status, headers, body = session.request("GET", "/notifications/inbox/messages", Origin="https://other.example:8443")
    assert status == 200 and len(json.loads(body)["messages"]) == 1
    assert headers["access-control-allow-origin"] == "https://other.example:8443"
    assert headers["access-control-expose-headers"] == "ETag"


def test_anonymous_cross_origin_requests_get_401(live_server, listed):
    anonymous = Browserless(live_server.url, {})
    status, headers, body = anonymous.request("GET", "/notifications/inbox/counts", Origin=FRONT_END)
    assert status == 401 and json.loads(body) == {"error": "unauthorized"}
    assert headers["access-control-allow-origin"] == FRONT_END  # the front end may read that it must sign in


def test_a_post_from_a_foreign_origin_is_refused_whatever_cors_would_do(session, listed, alice, settings):
    # Trusted for the site's own forms, not listed for the inbox: still refused here.
    settings.CSRF_TRUSTED_ORIGINS = ["https://partner.example"]
    add_message(recipient_of(alice))
    token = session.csrf_token()
    for origin in ("https://partner.example", "https://evil.example", "null", "http://app.example.com"):
        status, headers, body = mark_all_read(session, Origin=origin, X_CSRFToken=token)
        assert (status, json.loads(body)) == (403, {"error": "origin not allowed"}), origin
        assert not CORS_HEADERS & set(headers)
    assert InboxMessage.objects.get().read_at is None


def test_a_post_from_a_listed_origin_is_checked_for_csrf(session, listed, alice):
    add_message(recipient_of(alice))
    status, headers, _ = mark_all_read(session, Origin=FRONT_END)  # no token
    assert status == 403
    assert InboxMessage.objects.get().read_at is None
    token = session.csrf_token()
    status, headers, _ = mark_all_read(session, Origin=FRONT_END, X_CSRFToken="x" * 64)  # a wrong token
    assert status == 403
    status, headers, body = mark_all_read(session, Origin=FRONT_END, X_CSRFToken=token)
    assert status == 200 and json.loads(body)["changed"] == 1
    assert headers["access-control-allow-origin"] == FRONT_END
    assert headers["access-control-expose-headers"] == "ETag"


def test_a_post_from_the_sites_own_origin(session, alice):
    add_message(recipient_of(alice))
    token = session.csrf_token()
    status, headers, body = mark_all_read(session, Origin=session.own_origin, X_CSRFToken=token)
    assert status == 200 and json.loads(body)["changed"] == 1
    assert not CORS_HEADERS & set(headers)


def test_the_listed_origins_are_not_trusted_by_the_rest_of_the_site(session, listed, alice):
    """The inbox's listed origins widen the inbox's CSRF check alone: the page's forms (and
    every other view) still refuse a POST from them."""
    add_message(recipient_of(alice))
    token = session.csrf_token()
    status, _, _ = session.request(
        "POST", "/notifications/inbox/", f"csrfmiddlewaretoken={token}&ids=all&state=read".encode(),
        Content_Type="application/x-www-form-urlencoded", Origin=FRONT_END,
    )  # fmt: skip
    assert status == 403
    assert InboxMessage.objects.get().read_at is None
