"""Hand-made list URLs: a list filters only on what its own filters offer, and a query no
database can run is refused (Django's "?e=1" page, or a 400), never a 500 or an oracle.

The reference is what the page itself links to: its filters, date hierarchy and search box.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from notifications.admin.base import MAX_SEARCH_CHARACTERS, MAX_SEARCH_WORDS
from notifications.api import schedule
from notifications.models import Suppression
from tests.support.admin_forms import staff
from tests.support.queue_states import SECRET, make, one_of_each

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:notifications_notification_changelist")
LISTS = [
    CHANGELIST,
    reverse("admin:notifications_deliveryattempt_changelist"),
    reverse("admin:notifications_tickrun_changelist"),
    reverse("admin:notifications_suppression_changelist"),
]


@pytest.mark.parametrize("guess", [SECRET[:10], "whsec_X"])
def test_a_secret_cannot_be_guessed_through_a_lookup_by_view_only_staff(guess):
    one_of_each()  # every row signs with SECRET
    viewer = staff("view_notification")

    response = viewer.get(CHANGELIST, {"webhook_secret__startswith": guess})

    # The same answer whether the guess is right or wrong: refused, no row listed.
    assert response.status_code == 400
    assert "_selected_action" not in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        {"webhook_secret": SECRET},
        {"webhook_secret__isnull": "False"},
        {"payload__has_key": "x"},
        {"channels__contains": "email"},  # a lookup SQLite lacks: was a 500 there
        {"body__regex": "(a+)+$"},
    ],
)
def test_lookups_the_page_does_not_offer_are_refused(admin_client, query):
    make("dead")

    assert admin_client.get(CHANGELIST, query).status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        {"state": "dead"},
        {"channel": "webhook"},
        {"priority__exact": "normal"},
        {"next_fire_at__year": "2030"},
    ],
)
def test_the_lists_own_filters_still_filter(admin_client, query):
    make("dead")

    assert admin_client.get(CHANGELIST, query).status_code == 200


def test_the_attempts_list_still_filters_by_row_outcome_and_date(admin_client):
    url = reverse("admin:notifications_deliveryattempt_changelist")
    query = {"notification_id": "1", "outcome__exact": "failed", "attempted_at__gte": "2026-01-01 00:00:00+00:00"}

    assert admin_client.get(url, query).status_code == 200
    assert admin_client.get(url, {"error__startswith": "x"}).status_code == 400


def test_a_row_due_in_the_year_9999_lists_and_its_year_link_is_refused_not_a_500(admin_client):
    last_year = datetime(9999, 6, 1, tzinfo=UTC)
    row = schedule(channels=["email"], email_to="a@example.com", subject="s", body="b", fire_at=last_year)

    listing = admin_client.get(CHANGELIST)
    assert listing.status_code == 200 and f'value="{row.pk}"' in listing.content.decode()
    assert "?next_fire_at__year=9999" in listing.content.decode()  # the drill-down link offered

    response = admin_client.get(CHANGELIST, {"next_fire_at__year": "9999"})

    assert response.status_code == 302 and response["Location"].endswith("?e=1")


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "parts", [{"year": "9999"}, {"year": "9999", "month": "12"}, {"year": "9999", "month": "12", "day": "31"}]
)
def test_the_last_year_in_a_date_hierarchy_is_refused_not_a_500(admin_client, url, parts):
    field = {
        CHANGELIST: "next_fire_at",
        LISTS[1]: "attempted_at",
        LISTS[2]: "finished_at",
        LISTS[3]: "created_at",
    }[url]

    response = admin_client.get(url, {f"{field}__{part}": value for part, value in parts.items()})

    assert response.status_code == 302 and response["Location"].endswith("?e=1")


@pytest.mark.parametrize("url", [*LISTS, reverse("admin:notifications_target_changelist")])
@pytest.mark.parametrize(
    "term",
    [
        " ".join(["word"] * (MAX_SEARCH_WORDS + 1)),
        " ".join(["w"] * 1_000),  # past SQLite's expression depth
        "x" * 60_000,  # past SQLite's LIKE pattern
        "x" * (MAX_SEARCH_CHARACTERS + 1),
    ],
)
def test_an_outsized_search_is_refused_not_a_500(admin_client, url, term):
    response = admin_client.get(url, {"q": term})

    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_a_pasted_error_message_is_still_searched(admin_client):
    make("dead")
    pasted = " ".join(["webhook: HTTP 503"] * 30)  # 90 words

    response = admin_client.get(CHANGELIST, {"q": pasted})

    assert response.status_code == 200


@pytest.mark.parametrize("spelling", ["Foo@Example.com", "FOO@EXAMPLE.COM", " foo@example.com"])
def test_adding_another_spelling_of_a_suppressed_address_is_a_form_error(admin_client, spelling):
    Suppression.objects.create(address="foo@example.com", reason="bounced")

    response = admin_client.post(reverse("admin:notifications_suppression_add"), {"address": spelling, "reason": "x"})

    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert list(Suppression.objects.values_list("address", "reason")) == [("foo@example.com", "bounced")]


def test_adding_the_unicode_spelling_of_a_suppressed_punycode_address_is_a_form_error(admin_client):
    Suppression.objects.create(address="a@bücher.de")  # stored as a@xn--bcher-kva.de

    response = admin_client.post(reverse("admin:notifications_suppression_add"), {"address": "A@BÜCHER.de"})

    assert response.status_code == 200 and "already exists" in response.content.decode()
    assert Suppression.objects.count() == 1
