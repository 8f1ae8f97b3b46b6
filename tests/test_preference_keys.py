"""A preference is stored under the key the tick and erase() look up (issue 45 #9):
an address as the admin's form, `set_preference` or a site's own code typed it is kept
in its normalised spelling, so an opt-out typed `Grace@Example.org` holds and is erased."""

from __future__ import annotations

import pytest
from django.core import mail
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import erase, run_tick, schedule, set_preference
from notifications.models import Preference

pytestmark = pytest.mark.django_db
CATEGORIES = {"news": {"label": "Product news", "default": "on"}}


@pytest.fixture(autouse=True)
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def add_in_admin(client, recipient: str):
    return client.post(
        reverse("admin:notifications_preference_add"),
        {"recipient": recipient, "category": "news", "channel": "", "enabled": ""},
    )


def test_an_opt_out_added_in_the_admin_holds_and_is_erased(admin_client):
    answer = add_in_admin(admin_client, "Grace@Example.org")
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert list(Preference.objects.values_list("recipient", flat=True)) == ["grace@example.org"]
    now = timezone.now()
    schedule(channels=["email"], email_to="grace@example.org", category="news", subject="Hi", body="News", fire_at=now)
    schedule(channels=["email"], email_to="bob@example.org", category="news", subject="Hi", body="News", fire_at=now)
    run_tick(now=now)
    assert [m.to for m in mail.outbox] == [["bob@example.org"]]  # she turned it off
    assert erase("grace@example.org")["preferences"] == 1
    assert not Preference.objects.exists()


def test_a_second_spelling_of_a_saved_key_is_a_form_error_not_a_crash(admin_client):
    set_preference("grace@example.org", "news", False)
    answer = add_in_admin(admin_client, "GRACE@example.ORG")
    assert answer.status_code == 200
    assert answer.context["adminform"].form.errors
    assert Preference.objects.count() == 1


def test_a_preference_saved_by_the_sites_own_code_is_normalised_and_ids_are_kept():
    Preference.objects.create(recipient="Ada <Ada@Example.com>", category="news", enabled=False)
    Preference.objects.create(recipient="User:42", category="news", enabled=False)
    assert set(Preference.objects.values_list("recipient", flat=True)) == {"ada@example.com", "User:42"}


def test_erasure_takes_the_admins_history_about_the_person_and_keeps_the_rest(admin_client, admin_user):
    from django.contrib.admin.models import ADDITION, LogEntry

    add_in_admin(admin_client, "Grace@Example.org")
    add_in_admin(admin_client, "bob@example.org")
    row = schedule(channels=["email"], email_to="grace@example.org", subject="Hi", body="News")
    LogEntry.objects.log_actions(admin_user.pk, [row], ADDITION, single_object=True)
    assert LogEntry.objects.count() == 3

    counts = erase(address="GRACE@example.org")

    assert counts["admin_history"] == 2
    (left,) = LogEntry.objects.all()
    assert left.object_repr.startswith("bob@example.org")
    assert "grace" not in str(list(LogEntry.objects.values())).casefold()
