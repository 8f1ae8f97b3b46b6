"""A shared categorised mail never carries one person's links to another (issue 45 #7).

A row without `recipient` addressed to several people is one message that every one of
them reads: it carries no unsubscribe or preference link (no List-Unsubscribe either),
so Bob in Cc cannot turn Ada's mail off or open her choices. A message that reaches one
person (the others suppressed) carries that person's links, never a suppressed one's."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.content import links
from notifications.models import Suppression

CATEGORIES = {"news": {"label": "Product news", "default": "on"}}
NOW = timezone.now().replace(microsecond=0)
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("categories")]
BODY = "News. Unsubscribe: [{{ unsubscribe_url }}] Choices: [{{ preferences_url }}]"


@pytest.fixture
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def news(**fields):
    return schedule(channels=["email"], subject="News", body=BODY, category="news", fire_at=NOW, **fields)


def tokens_in(text: str) -> list[str]:
    return re.findall(r"https://example\.com/notifications/\w+/([^/\]>]+)/", text)


def test_a_mail_to_several_people_carries_no_ones_links(smtp):
    news(email_to="ada@example.com", email_cc=["bob@example.com"])
    assert run_tick(now=NOW).counts()["succeeded"] == 1
    (delivered,) = smtp.delivered
    message = delivered.message
    assert sorted(delivered.rcpt_tos) == ["ada@example.com", "bob@example.com"]
    assert message["List-Unsubscribe"] is None and message["List-Unsubscribe-Post"] is None
    text = message.get_content()
    assert "Unsubscribe: [] Choices: []" in text
    assert tokens_in(text) == []


def test_a_mail_that_reaches_one_person_carries_their_links_not_a_suppressed_ones(smtp):
    Suppression.objects.create(address="ada@example.com", reason="550")
    news(email_to="Ada <ADA@example.com>", email_cc=["bob@example.com"])
    run_tick(now=NOW)
    (delivered,) = smtp.delivered
    assert delivered.rcpt_tos == ["bob@example.com"]
    message = delivered.message
    found = tokens_in(message["List-Unsubscribe"] + message.get_content())
    assert found
    for token in found:
        person = links.read_unsubscribe(token) or (links.read_preferences(token), "news")
        assert person == ("bob@example.com", "news")


def test_the_same_person_twice_is_one_person(smtp):
    news(email_to="ada@example.com", email_bcc=["Ada@Example.com"])
    run_tick(now=NOW)
    message = smtp.delivered[0].message
    (token,) = tokens_in(message["List-Unsubscribe"])
    assert links.read_unsubscribe(token) == ("ada@example.com", "news")
