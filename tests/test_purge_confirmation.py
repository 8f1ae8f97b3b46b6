"""The purge of a select-all ("Select all 3,000"): a confirmation page that summarises.

The page counts the rows per state and lists only the first PURGE_SHOWN; its form posts
the selection back as `select_across` with the count and the highest pk it counted, not
a field per row (150,000 of those took 40 s and 453 MB to render, and Django refuses a
post of more than 1,000 fields). "Yes" purges the rows counted, logging each: not a row
added to the queue after the page was shown.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import DELETION, LogEntry

from notifications.models import Notification
from tests.support.admin_forms import CHANGELIST, answer_yes, list_action, select_all, texts, visible_text
from tests.support.queue_states import make, many

pytestmark = pytest.mark.django_db

PAGE_LIMIT = 64 * 1024  # bytes: the page of 100 rows is about 35 KB; of 3,000 rows it was 700 KB


@pytest.fixture
def three_thousand():
    many(2_000, "dead")
    many(600, "scheduled")
    many(400, "retrying")


def test_a_select_all_confirmation_counts_per_state_and_lists_a_page(admin_client, three_thousand):
    page = select_all(admin_client, "purge")

    assert page.status_code == 200
    text = visible_text(page)
    assert "Purge 3000 notifications?" in text
    assert "These 3000 notifications will be deleted" in text
    assert "Scheduled 600" in text and "Retrying 400" in text and "Dead letter 2000" in text
    assert "and 2900 more" in text
    listed = re.search(r'<table class="nq-purge-list">.*?</table>', page.content.decode(), re.S)
    assert listed is not None and listed.group().count("<tr>") == 1 + 100  # the header and the first 100 rows
    assert page.content.decode().count('name="_selected_action"') <= 100
    assert len(page.content) < PAGE_LIMIT
    assert Notification.objects.count() == 3_000  # nothing deleted yet


def test_yes_purges_the_rows_counted_and_not_one_added_since(admin_client, three_thousand):
    counted = set(Notification.objects.values_list("pk", flat=True))
    page = select_all(admin_client, "purge")
    gone = min(counted)
    Notification.objects.filter(pk=gone).delete()  # another operator was faster
    late = make("dead")  # queued after the page was shown

    done = answer_yes(admin_client, page)

    assert list(Notification.objects.values_list("pk", flat=True)) == [late.pk]
    assert texts(done) == [
        "Purged 2999 notifications. 1 skipped: already gone. Their delivery history stays readable for 30 days."
    ]
    logged = LogEntry.objects.filter(action_flag=DELETION)
    assert set(logged.values_list("object_id", flat=True)) == {str(pk) for pk in counted - {gone}}
    assert logged.get(object_id=str(max(counted))).object_repr == f"Notification #{max(counted)} (webhook)"


def test_a_select_all_of_a_filtered_list_purges_the_filtered_rows(admin_client, three_thousand):
    page = select_all(admin_client, "purge", f"{CHANGELIST}?state=dead")

    text = visible_text(page)
    assert "Purge 2000 notifications?" in text and "Dead letter 2000" in text and "Scheduled" not in text
    done = answer_yes(admin_client, page)

    assert texts(done) == ["Purged 2000 notifications. Their delivery history stays readable for 30 days."]
    assert Notification.objects.count() == 1_000
    assert not Notification.objects.dead().exists()


def test_rows_that_join_a_select_all_after_the_page_make_it_ask_again(admin_client):
    joins = make("retrying")  # queued before the page, dead-lettered after it
    many(150, "dead")
    page = select_all(admin_client, "purge", f"{CHANGELIST}?state=dead")
    Notification.objects.filter(pk=joins.pk).update(dead_lettered_at=joins.next_fire_at, next_fire_at=None)

    again = answer_yes(admin_client, page)

    assert Notification.objects.count() == 151  # nothing purged
    assert texts(again) == [
        "151 notifications match now, more than the 150 you confirmed: nothing was purged. "
        "Check the new count and confirm again."
    ]
    assert "Purge 151 notifications?" in visible_text(again)
    answer_yes(admin_client, again)
    assert not Notification.objects.exists()


def test_a_selection_bigger_than_the_list_shown_is_posted_back_row_by_row(admin_client):
    """Without "Select all" the selection is at most a page ("Show all" lists 200 rows)."""
    many(150, "dead")
    rows = list(Notification.objects.all())

    page = list_action(admin_client, "purge", rows)

    assert "Purge 150 notifications?" in visible_text(page) and "and 50 more" in visible_text(page)
    assert page.content.decode().count('name="_selected_action"') == 150
    answer_yes(admin_client, page)
    assert not Notification.objects.exists()
