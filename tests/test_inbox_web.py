"""The signed-in user's inbox through Django's test client: the JSON endpoints (counts with
their ETag, pages of messages behind a cursor, marking), the page and its forms, the badge,
and who may see and change what (401, the login redirect, CSRF, another person's ids)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.template import engines
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from notifications.models import InboxMessage
from tests.support.inbox_messages import add_message, recipient_of

pytestmark = pytest.mark.django_db

COUNTS = reverse("notifications:inbox-counts")
MESSAGES = reverse("notifications:inbox-messages")
MARK = reverse("notifications:inbox-mark")
PAGE = reverse("notifications:inbox")
HOSTILE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 1">'


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="pw")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="pw")


@pytest.fixture
def as_alice(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def post_json(client: Client, url: str, body: object, **headers: str):
    return client.post(url, json.dumps(body), content_type="application/json", headers=headers)


def test_urls_are_the_specs():
    assert (PAGE, COUNTS, MESSAGES, MARK) == (
        "/notifications/inbox/",
        "/notifications/inbox/counts",
        "/notifications/inbox/messages",
        "/notifications/inbox/mark",
    )


# Without a recipient.


@pytest.mark.parametrize("method, url", [("get", COUNTS), ("get", MESSAGES), ("post", MARK)])
def test_json_endpoints_answer_401_revealing_nothing(client, alice, method, url):
    add_message(recipient_of(alice), "secret")
    response = getattr(client, method)(url, content_type="application/json", data={"ids": "all", "state": "read"})
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "unauthorized"}
    assert "no-cache" in response["Cache-Control"] and "private" in response["Cache-Control"]
    assert InboxMessage.objects.get().read_at is None


def test_the_page_redirects_to_the_login(client):
    response = client.get(f"{PAGE}?state=unread")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/notifications/inbox/%3Fstate%3Dunread"
    assert client.post(PAGE, {"ids": "all", "state": "read"}).status_code == 302


def test_a_site_names_its_own_recipient(client, settings, alice):
    settings.NOTIFICATIONS_INBOX_RECIPIENT = "tests.test_inbox_web.by_header"
    add_message("team:7", "for the team")
    add_message(recipient_of(alice), "for alice")
    assert client.get(COUNTS).status_code == 401  # the site's function said None
    response = client.get(MESSAGES, headers={"X-Team": "7"})
    assert [m["title"] for m in response.json()["messages"]] == ["for the team"]


def by_header(request) -> str | None:
    team = request.headers.get("X-Team")
    return f"team:{team}" if team else None


# inbox/counts


def test_counts_with_etag_304_and_private_caching(as_alice, alice, bob):
    me = recipient_of(alice)
    add_message(me, "one")
    add_message(me, "two", seen_at=timezone.now())
    add_message(me, "three", seen_at=timezone.now(), read_at=timezone.now())
    add_message(me, "archived", seen_at=timezone.now(), read_at=timezone.now(), archived_at=timezone.now())
    add_message(recipient_of(bob), "bob's")

    response = as_alice.get(COUNTS)
    assert response.status_code == 200
    assert response.json() == {"unseen": 1, "unread": 2, "total": 3}
    etag = response["ETag"]
    assert etag.startswith('"') and etag.endswith('"')
    assert set(response["Cache-Control"].replace(" ", "").split(",")) == {"private", "no-cache"}
    assert "Cookie" in response["Vary"]

    again = as_alice.get(COUNTS, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again["ETag"] == etag and again.content == b""
    assert as_alice.get(COUNTS, headers={"If-None-Match": f'"other", W/{etag}'}).status_code == 304

    add_message(me, "new")
    changed = as_alice.get(COUNTS, headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.json() == {"unseen": 2, "unread": 3, "total": 4}
    assert changed["ETag"] != etag


def test_same_counts_of_two_people_have_different_etags(as_alice, alice, bob):
    add_message(recipient_of(alice))
    add_message(recipient_of(bob))
    as_bob = Client()
    as_bob.force_login(bob)
    mine, theirs = as_alice.get(COUNTS), as_bob.get(COUNTS)
    assert mine.json() == theirs.json()
    assert mine["ETag"] != theirs["ETag"]
    assert as_bob.get(COUNTS, headers={"If-None-Match": mine["ETag"]}).status_code == 200


# inbox/messages


def test_messages_newest_first_with_the_specs_fields(as_alice, alice, bob):
    me, now = recipient_of(alice), timezone.now()
    old = add_message(me, "old", created_at=now - timedelta(hours=2), category="news", body="b", url="/x",
                      data={"k": [1]}, seen_at=now)  # fmt: skip
    new = add_message(me, "new", created_at=now - timedelta(hours=1))
    add_message(recipient_of(bob), "bob's")
    body = as_alice.get(MESSAGES).json()
    assert body["next"] is None
    assert [m["id"] for m in body["messages"]] == [str(new.id), str(old.id)]
    first = body["messages"][1]
    assert first == {
        "id": str(old.id),
        "title": "old",
        "body": "b",
        "url": "/x",
        "category": "news",
        "data": {"k": [1]},
        "created_at": old.created_at.isoformat(),
        "seen_at": now.isoformat(),
        "read_at": None,
    }


def test_messages_by_state_and_category(as_alice, alice):
    me, now = recipient_of(alice), timezone.now()
    add_message(me, "unread news", category="news")
    add_message(me, "read", read_at=now, seen_at=now)
    add_message(me, "archived", read_at=now, seen_at=now, archived_at=now)

    def titles(query: str) -> set[str]:
        return {m["title"] for m in as_alice.get(f"{MESSAGES}?{query}").json()["messages"]}

    assert titles("") == {"unread news"}  # unread by default, as notifications.inbox.messages
    assert titles("state=all") == {"unread news", "read"}
    assert titles("state=archived") == {"archived"}
    assert titles("state=all&category=news") == {"unread news"}
    assert titles("state=all&category=other") == set()


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=abc", "limit=-1", "limit=", "state=read",
                                   "cursor=forged", "limit=1e2"])  # fmt: skip
def test_messages_refuse_a_bad_query(as_alice, query):
    response = as_alice.get(f"{MESSAGES}?{query}")
    assert response.status_code == 400
    assert set(response.json()) == {"error"}


def test_limit_is_twenty_by_default_and_up_to_a_hundred(as_alice, alice):
    me, now = recipient_of(alice), timezone.now()
    for n in range(105):
        add_message(me, f"m{n}", created_at=now - timedelta(seconds=n))
    assert len(as_alice.get(MESSAGES).json()["messages"]) == 20
    assert len(as_alice.get(f"{MESSAGES}?limit=100").json()["messages"]) == 100
    assert len(as_alice.get(f"{MESSAGES}?limit=1").json()["messages"]) == 1


def read_all(client: Client, query: str, between_pages=lambda: None) -> list[str]:
    titles, url = [], f"{MESSAGES}?{query}"
    while True:
        body = client.get(url).json()
        titles += [m["title"] for m in body["messages"]]
        if body["next"] is None:
            return titles
        between_pages()
        url = f"{MESSAGES}?{query}&cursor={body['next']}"


def test_the_cursor_is_stable_while_messages_arrive(as_alice, alice):
    me, now = recipient_of(alice), timezone.now()
    # Seven messages, three of them at one instant (the id orders them), older to newer.
    instants = [now - timedelta(minutes=m) for m in (10, 9, 8, 8, 8, 7, 6)]
    for n, instant in enumerate(instants):
        add_message(me, f"m{n}", created_at=instant)
    before = read_all(as_alice, "state=all&limit=2")
    assert sorted(before) == [f"m{n}" for n in range(7)] and len(set(before)) == 7

    arrivals = iter(range(100))

    def a_message_arrives():
        add_message(me, f"new{next(arrivals)}")  # now: newer than every page

    during = read_all(as_alice, "state=all&limit=2", between_pages=a_message_arrives)
    assert during == before  # no message repeated, none skipped, the new ones not mixed in


def test_a_cursor_cannot_reach_another_persons_messages(as_alice, alice, bob):
    now = timezone.now()
    for n in range(3):
        add_message(recipient_of(bob), f"bob{n}", created_at=now - timedelta(minutes=n))
        add_message(recipient_of(alice), f"alice{n}", created_at=now - timedelta(minutes=n))
    assert read_all(as_alice, "state=all&limit=1") == ["alice0", "alice1", "alice2"]


# inbox/mark


def test_mark_read_and_all(as_alice, alice):
    me = recipient_of(alice)
    first, second = add_message(me, "first"), add_message(me, "second")
    response = post_json(as_alice, MARK, {"ids": [str(first.id)], "state": "read"})
    assert response.status_code == 200
    assert response.json() == {"changed": 1, "counts": {"unseen": 1, "unread": 1, "total": 2}}
    first.refresh_from_db()
    assert first.read_at is not None and first.seen_at is not None
    assert post_json(as_alice, MARK, {"ids": "all", "state": "archived"}).json() == {
        "changed": 2,
        "counts": {"unseen": 0, "unread": 0, "total": 0},
    }
    second.refresh_from_db()
    assert second.archived_at is not None


def test_another_persons_ids_change_nothing_and_look_unknown(as_alice, alice, bob):
    theirs = add_message(recipient_of(bob), "bob's")
    add_message(recipient_of(alice), "mine")
    for ids in ([str(theirs.id)], ["00000000-0000-0000-0000-000000000000"], ["not an id"]):
        response = post_json(as_alice, MARK, {"ids": ids, "state": "read"})
        assert response.status_code == 200
        assert response.json() == {"changed": 0, "counts": {"unseen": 1, "unread": 1, "total": 1}}
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_mark_is_post_only(as_alice, alice):
    add_message(recipient_of(alice))
    response = as_alice.get(MARK, {"ids": "all", "state": "read"})
    assert response.status_code == 405
    assert InboxMessage.objects.get().read_at is None


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'"all"',
        b'{"ids": "all"}',
        b'{"state": "read"}',
        b'{"ids": "all", "state": "deleted"}',
        b'{"ids": "some", "state": "read"}',
        b'{"ids": [1, 2], "state": "read"}',
        b'{"ids": {"a": 1}, "state": "read"}',
        b'{"ids": "all", "state": "read", "extra": 1}',
        b'{"ids": "all", "state": ["read"]}',
        b"\xff\xfe",
    ],
)
def test_mark_refuses_a_malformed_body_and_changes_nothing(as_alice, alice, body):
    add_message(recipient_of(alice))
    response = as_alice.post(MARK, body, content_type="application/json")
    assert response.status_code == 400
    assert set(response.json()) == {"error"}
    assert InboxMessage.objects.get().read_at is None


def test_mark_refuses_more_ids_than_it_takes(as_alice, alice):
    add_message(recipient_of(alice))
    response = post_json(as_alice, MARK, {"ids": ["x"] * 1001, "state": "read"})
    assert response.status_code == 400


def test_mark_needs_the_csrf_token(alice):
    mine = add_message(recipient_of(alice))
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert post_json(client, MARK, {"ids": "all", "state": "read"}).status_code == 403
    mine.refresh_from_db()
    assert mine.read_at is None
    client.get(PAGE)  # the page's forms set the csrftoken cookie
    token = client.cookies["csrftoken"].value
    response = post_json(client, MARK, {"ids": "all", "state": "read"}, **{"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["changed"] == 1


# The page.


def test_the_page_escapes_what_a_message_holds_and_links_only_safe_urls(as_alice, alice):
    me, now = recipient_of(alice), timezone.now()
    add_message(me, HOSTILE, body=f"line one\n{HOSTILE}", category=HOSTILE, url="javascript:alert(1)",
                created_at=now - timedelta(minutes=3))  # fmt: skip
    add_message(me, "scheme-relative", url="//evil.example/x", created_at=now - timedelta(minutes=2))
    add_message(me, "site path", url="/orders/7?a=1&b=2", created_at=now - timedelta(minutes=1))
    add_message(me, "other site", url="https://shop.example/o/7", created_at=now)
    html = as_alice.get(PAGE).content.decode()
    assert "<script>window.__xss" not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in html
    assert "line one<br>" in html
    assert "javascript:" not in html and "//evil.example" not in html
    assert 'href="/orders/7?a=1&amp;b=2"' in html
    assert 'href="https://shop.example/o/7"' in html


def test_the_page_marks_read_archives_and_marks_all_read_by_post_forms(as_alice, alice, bob):
    me = recipient_of(alice)
    first, second, third = add_message(me, "first"), add_message(me, "second"), add_message(me, "third")
    theirs = add_message(recipient_of(bob), "bob's")
    html = as_alice.get(PAGE).content.decode()
    assert html.count('name="csrfmiddlewaretoken"') == 4  # mark all read, and one form per message
    assert "bob&#x27;s" not in html and "bob's" not in html

    response = as_alice.post(f"{PAGE}?state=unread", {"ids": str(first.id), "state": "read"})
    assert response.status_code == 303 and response["Location"] == f"{PAGE}?state=unread"
    assert as_alice.post(PAGE, {"ids": str(second.id), "state": "archived"}).status_code == 303
    assert as_alice.post(PAGE, {"ids": str(theirs.id), "state": "read"}).status_code == 303
    first.refresh_from_db(), second.refresh_from_db(), theirs.refresh_from_db()
    assert first.read_at and second.archived_at and theirs.read_at is None

    unread = as_alice.get(f"{PAGE}?state=unread").content.decode()
    assert "third" in unread and "first" not in unread and "second" not in unread
    assert as_alice.post(PAGE, {"ids": "all", "state": "read"}).status_code == 303
    third.refresh_from_db()
    assert third.read_at is not None
    archived = as_alice.get(f"{PAGE}?state=archived").content.decode()
    assert "second" in archived and 'value="unarchived"' in archived


def test_the_page_refuses_an_unknown_mark_and_a_get_changes_nothing(as_alice, alice):
    add_message(recipient_of(alice))
    assert as_alice.post(PAGE, {"ids": "all", "state": "deleted"}).status_code == 400
    assert as_alice.get(PAGE, {"ids": "all", "state": "read"}).status_code == 200
    assert InboxMessage.objects.get().read_at is None


def test_the_pages_forms_need_the_csrf_token(alice):
    add_message(recipient_of(alice))
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(PAGE, {"ids": "all", "state": "read"}).status_code == 403
    assert InboxMessage.objects.get().read_at is None


def test_the_page_pages_older_messages(as_alice, alice):
    me, now = recipient_of(alice), timezone.now()
    for n in range(30):
        add_message(me, f"message {n:02}", created_at=now - timedelta(minutes=n))
    first = as_alice.get(PAGE)
    assert "message 24" in first.content.decode() and "message 25" not in first.content.decode()
    older = as_alice.get(PAGE, {"state": "all", "cursor": first.context["next"]}).content.decode()
    assert "message 25" in older and "message 29" in older and "message 24" not in older


# The badge.


def render_badge(request) -> str:
    return engines["django"].from_string("{% load notifications %}{% inbox_badge %}").render({}, request)


def test_the_badge_shows_the_persons_own_unread_count(alice, bob, settings):
    settings.NOTIFICATIONS_INBOX_POLL_SECONDS = 12
    for _ in range(3):
        add_message(recipient_of(alice))
    add_message(recipient_of(bob))
    request = RequestFactory().get("/")
    request.user = alice
    html = render_badge(request)
    assert 'href="/notifications/inbox/"' in html
    assert 'data-nq-inbox-counts="/notifications/inbox/counts"' in html
    assert 'data-nq-poll-seconds="12"' in html
    assert '<span class="nq-inbox-unread">3</span>' in html
    assert '<script src="/static/notifications/inbox-badge.js" defer></script>' in html
    assert "<script>" not in html  # nothing inline: it runs under CSP script-src 'self'
    request.user = bob
    assert '<span class="nq-inbox-unread">1</span>' in render_badge(request)


def test_no_badge_without_a_recipient(alice):
    from django.contrib.auth.models import AnonymousUser

    add_message(recipient_of(alice))
    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    assert render_badge(request).strip() == ""


@pytest.mark.parametrize(
    ("argument", "shown"), [("2.5", "2.5"), ("0.1", "0.1"), ("0", "12"), ("-3", "12"), ('"soon"', "12")]
)
def test_a_badge_may_set_its_own_interval(alice, settings, argument, shown):
    """`{% inbox_badge poll_seconds=... %}`: a positive number for this badge; anything
    else falls back to NOTIFICATIONS_INBOX_POLL_SECONDS rather than break the page."""
    settings.NOTIFICATIONS_INBOX_POLL_SECONDS = 12
    request = RequestFactory().get("/")
    request.user = alice
    template = f"{{% load notifications %}}{{% inbox_badge poll_seconds={argument} %}}"
    assert f'data-nq-poll-seconds="{shown}"' in engines["django"].from_string(template).render({}, request)
