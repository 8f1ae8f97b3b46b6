"""Email, version 2, in the admin: recipients in the list, the new fields on the change page,
and the suppression list (deleting an entry lifts it)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from notifications.api import schedule
from notifications.models import Suppression

pytestmark = pytest.mark.django_db


def row(**fields):
    fields = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello", **fields}
    return schedule(**fields)


def test_the_list_shows_the_first_recipient_and_how_many_more(admin_client):
    row(email_to=["ada@example.com", "grace@example.com", "linus@example.com"])

    response = admin_client.get(reverse("admin:notifications_notification_changelist"))

    assert "ada@example.com +2" in response.content.decode()


def test_the_change_page_edits_recipients_as_text(admin_client):
    saved = row(email_to=["ada@example.com", "grace@example.com"], email_cc=["linus@example.com"])

    response = admin_client.get(reverse("admin:notifications_notification_change", args=[saved.pk]))

    form = response.context["adminform"].form
    for name in ("email_cc", "email_bcc", "reply_to", "html_body", "template", "language"):
        assert name in form.fields
    assert 'value="ada@example.com, grace@example.com"' in response.content.decode()


def test_suppressions_are_listed_and_deleting_one_lifts_it(admin_client):
    entry = Suppression.objects.create(address="gone@example.com", reason="SMTP 550 5.1.1 No such user here")

    listing = admin_client.get(reverse("admin:notifications_suppression_changelist")).content.decode()
    assert "gone@example.com" in listing and "SMTP 550 5.1.1" in listing

    response = admin_client.post(reverse("admin:notifications_suppression_delete", args=[entry.pk]), {"post": "yes"})

    assert response.status_code == 302
    assert not Suppression.objects.exists()


def test_an_address_added_by_hand_is_stored_lowercased(admin_client):
    admin_client.post(reverse("admin:notifications_suppression_add"), {"address": "Ada@Example.com", "reason": "asked"})

    assert list(Suppression.objects.values_list("address", "reason")) == [("ada@example.com", "asked")]
