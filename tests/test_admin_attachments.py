"""The admin of a row with mail fields: its From, mailer, priority (a column and a filter), and
its attachments listed on the change page and downloadable only with the view permission."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from notifications.api import schedule
from notifications.models.attachments import Attachment
from tests.support.admin_forms import CHANGELIST, change_url, staff

pytestmark = pytest.mark.django_db

EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Invoice", "body": "Attached."}


@pytest.fixture
def row():
    return schedule(
        **EMAIL,
        from_email="Billing <billing@example.com>",
        priority="high",
        headers={"X-Campaign": "spring"},
        attachments=[
            Attachment("invoice 7.pdf", b"%PDF-1.4 \x00\x01", "application/pdf"),
            Attachment("<script>.html", b"<script>alert(1)</script>", "text/html"),
        ],
    )


def download_url(row, index: int) -> str:
    return reverse("admin:notifications_notification_attachment", args=[row.pk, index])


def test_the_change_page_lists_attachments_from_and_priority(admin_client, row):
    page = admin_client.get(change_url(row)).content.decode()

    assert f'<a href="{download_url(row, 0)}" download>invoice 7.pdf</a> (application/pdf, 11\xa0bytes)' in page
    assert "&lt;script&gt;.html" in page and "<script>.html" not in page  # names are escaped
    assert "Billing &lt;billing@example.com&gt;" in page
    assert 'value="high" selected' in page
    assert "X-Campaign" in page


def test_priority_is_shown_in_the_list_and_a_filter(admin_client, row):
    schedule(**EMAIL, priority="low")

    listed = admin_client.get(CHANGELIST)
    page = listed.content.decode()
    assert '<span class="nq-clip nq-priority">priority: high</span>' in page
    assert page.count("nq-priority") == 2  # the high and the low row; normal ones say nothing
    high = admin_client.get(CHANGELIST + "?priority__exact=high")
    assert [r.pk for r in high.context["cl"].result_list] == [row.pk]


def test_a_user_with_view_permission_downloads_the_bytes(row):
    response = staff("view_notification").get(download_url(row, 0))

    assert response.status_code == 200
    assert response.content == b"%PDF-1.4 \x00\x01"
    assert response["Content-Type"] == "application/octet-stream"  # never rendered in the admin's origin
    assert response["Content-Disposition"] == (
        "attachment; filename=\"invoice 7.pdf\"; filename*=UTF-8''invoice%207.pdf"
    )
    assert response["X-Content-Type-Options"] == "nosniff"
    html = staff("change_notification").get(download_url(row, 1))
    assert (html.status_code, html["Content-Type"]) == (200, "application/octet-stream")


def test_downloads_need_the_view_permission_on_the_server(row):
    assert staff().get(download_url(row, 0)).status_code == 403  # staff, but no permission on rows
    assert staff("delete_notification").get(download_url(row, 0)).status_code == 403
    anonymous = Client().get(download_url(row, 0))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_an_attachment_that_is_not_there_is_a_404(admin_client, row):
    assert admin_client.get(download_url(row, 2)).status_code == 404
    assert admin_client.get(reverse("admin:notifications_notification_attachment", args=[99999, 0])).status_code == 404


def test_saving_the_change_page_keeps_the_attachments_and_mail_fields(admin_client, row):
    from tests.support.admin_forms import change_form

    response = admin_client.post(change_url(row), change_form(row, subject="Invoice, again"))

    assert response.status_code == 302, response.content.decode()[:2000]
    row.refresh_from_db()
    assert (row.subject, row.priority, row.from_email) == ("Invoice, again", "high", "Billing <billing@example.com>")
    assert [a["name"] for a in row.attachments] == ["invoice 7.pdf", "<script>.html"]
