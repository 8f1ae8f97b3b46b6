"""`QueuedEmailBackend` with real components: a site's mail queued, then sent by the tick.

aiosmtpd is the real mail server: a message with alternatives, two attachments, an inline
image and custom headers arrives as the same message as when sent directly, part by part
and byte for byte. Rows are made when the caller's transaction commits (tests run with
real commits); django.contrib.auth's own password-reset view is queued; django-anymail's
attributes arrive at a loopback imitation of Resend.
"""

from __future__ import annotations

import json
from email.message import EmailMessage as ParsedMessage

import django
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.core import mail
from django.core.mail import EmailMultiAlternatives, send_mail
from django.db import transaction
from django.test.utils import override_settings
from django.urls import path
from django.utils import timezone

from notifications.api import run_tick
from notifications.mail import QueuedEmailBackend
from notifications.models import Notification, attachments
from tests.support.mail_servers import SMTP_BACKEND, ProviderAPI, SMTPServer, queue_in_front_of, real_connection

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: rows are made on commit

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
RESEND = "anymail.backends.resend.EmailBackend"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + bytes(range(256))
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"

# The password-reset view needs its confirmation URL to exist.
urlpatterns = [
    path("password-reset/", auth_views.PasswordResetView.as_view(), name="password_reset"),
    path("password-reset/done/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path("reset/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(), name="password_reset_confirm"),
]


@pytest.fixture
def smtp():
    server = SMTPServer()
    yield server
    server.close()


@pytest.fixture
def queued_smtp(smtp):
    with queue_in_front_of(SMTP_BACKEND, host="127.0.0.1", port=smtp.port, timeout=5):
        yield smtp


def inline_image(content_id: str):
    """An inline image with its Content-ID, the way the installed Django attaches one."""
    if django.VERSION >= (6, 0):
        from email.message import MIMEPart

        part = MIMEPart()
        part.set_content(PNG, maintype="image", subtype="png", disposition="inline", filename="logo.png")
        part["Content-ID"] = f"<{content_id}>"
        return part
    from email.mime.image import MIMEImage

    image = MIMEImage(PNG, "png")
    image.add_header("Content-ID", f"<{content_id}>")
    image.add_header("Content-Disposition", "inline", filename="logo.png")
    return image


def rich_message(connection=None) -> EmailMultiAlternatives:
    message = EmailMultiAlternatives(
        subject="Rechnung 7 — fällig",
        body="Hello Ada,\nyour invoice is attached.\n",
        from_email="Billing <billing@example.com>",
        to=["Ada Lovelace <ada@example.com>"],
        cc=["grace@example.com"],
        bcc=["audit@example.com"],
        reply_to=["desk@example.com"],
        headers={"X-Campaign": "spring", "List-Unsubscribe": "<mailto:unsubscribe@example.com>"},
        connection=connection,
    )
    message.attach_alternative('<p>Hello <b>Ada</b> <img src="cid:logo@example.com"></p>', "text/html")
    message.attach("invoice-7.pdf", PDF, "application/pdf")
    message.attach("lines.csv", "item;price\nTea;3.50 €\n", "text/csv")
    message.attach(inline_image("logo@example.com"))
    return message


def parts(message: ParsedMessage) -> list[tuple]:
    """The MIME tree as (depth, content type, filename, disposition, Content-ID, decoded bytes)."""
    found = []

    def walk(part, depth):
        payload = None if part.is_multipart() else part.get_payload(decode=True)
        found.append(
            (
                depth,
                part.get_content_type(),
                part.get_filename(),
                part.get_content_disposition(),
                (part["Content-ID"] or "").strip() or None,
                payload,
            )
        )
        if part.is_multipart():
            for child in part.iter_parts():
                walk(child, depth + 1)

    walk(message, 0)
    return found


VISIBLE = ("From", "To", "Cc", "Reply-To", "Subject", "X-Campaign", "List-Unsubscribe", "MIME-Version")


def test_a_rich_message_arrives_as_if_sent_directly_part_by_part(queued_smtp):
    # The reference: the same message straight through the SMTP backend.
    rich_message(real_connection(SMTP_BACKEND, host="127.0.0.1", port=queued_smtp.port, timeout=5)).send()
    (direct,) = queued_smtp.delivered
    queued_smtp.delivered.clear()

    assert rich_message().send() == 1  # through the site's default mailer: the queue
    assert queued_smtp.delivered == []  # queued, not sent
    (row,) = Notification.objects.all()
    assert row.from_email == "Billing <billing@example.com>"
    assert [a["name"] for a in row.attachments] == ["invoice-7.pdf", "lines.csv", "logo.png"]

    report = run_tick()

    assert report.counts()["succeeded"] == 1
    (queued,) = queued_smtp.delivered
    assert queued.mail_from == direct.mail_from == "billing@example.com"
    assert (
        sorted(queued.rcpt_tos)
        == sorted(direct.rcpt_tos)
        == [
            "ada@example.com",
            "audit@example.com",
            "grace@example.com",
        ]
    )
    got, want = queued.message, direct.message
    for name in VISIBLE:
        assert got[name] == want[name], name
    assert got["Bcc"] is None
    assert got["Message-ID"].strip().startswith(f"<notification-{row.pk}.{row.firing_id}@")
    assert parts(got) == parts(want)
    # And byte for byte what was given: the PDF, the CSV's text and the image.
    payloads = {p[2]: p[5] for p in parts(got) if p[2]}
    assert payloads["invoice-7.pdf"] == PDF
    assert (
        payloads["lines.csv"].decode() == "item;price\r\nTea;3.50 €\r\n"
    )  # a text part: CRLF on the wire, as sent directly
    assert payloads["logo.png"] == PNG
    assert [p[4] for p in parts(got) if p[2] == "logo.png"] == ["<logo@example.com>"]
    assert not Notification.objects.exists()  # one-shot, delivered: deleted, and its files too
    for item in row.attachments:
        assert not attachments.storage().exists(item["file"])


def test_send_mail_in_a_rolled_back_transaction_queues_and_sends_nothing(queued_smtp):
    with pytest.raises(RuntimeError), transaction.atomic():
        assert send_mail("Hi", "Body", None, ["ada@example.com"]) == 1
        raise RuntimeError("the view failed")

    assert not Notification.objects.exists()
    run_tick()
    assert queued_smtp.delivered == []


def test_a_committed_send_mail_is_sent_exactly_once(queued_smtp):
    with transaction.atomic():
        send_mail("Hi", "Body {{ not a template }}", None, ["ada@example.com"])
        assert not Notification.objects.exists()  # not before the commit

    (row,) = Notification.objects.all()
    assert (row.subject, row.body, row.email_to) == ("Hi", "Body {{ not a template }}", ["ada@example.com"])
    first, second = run_tick(), run_tick()

    assert (first.counts()["succeeded"], second.claimed) == (1, 0)
    (delivered,) = queued_smtp.delivered
    assert delivered.message.get_content().strip() == "Body {{ not a template }}"  # sent as it is
    assert delivered.mail_from == "queue@example.com"  # DEFAULT_FROM_EMAIL


def test_a_failed_send_is_retried_from_the_queue(queued_smtp):
    queued_smtp.data_replies.append("451 4.3.0 Try again later")
    send_mail("Hi", "Body", None, ["ada@example.com"])

    report = run_tick()
    (row,) = Notification.objects.all()
    assert (report.counts()["retried"], row.error_count) == (1, 1)
    assert run_tick(now=row.next_fire_at).counts()["succeeded"] == 1
    assert len(queued_smtp.delivered) == 1


urls = override_settings(ROOT_URLCONF=__name__)


@urls
def test_djangos_own_password_reset_view_is_queued_and_delivered(client):
    user = get_user_model().objects.create_user("ada", "ada@example.com", "pw")
    with queue_in_front_of(LOCMEM):
        response = client.post("/password-reset/", {"email": "ada@example.com"})
        assert response.status_code == 302
        assert mail.outbox == []  # queued
        (row,) = Notification.objects.all()
        assert row.email_to == ["ada@example.com"]

        report = run_tick()

    assert report.counts()["succeeded"] == 1
    (sent,) = mail.outbox
    assert sent.to == ["ada@example.com"]
    assert "Password reset" in sent.subject
    assert f"/reset/{django.utils.http.urlsafe_base64_encode(str(user.pk).encode())}/" in sent.body
    assert sent.extra_headers["Message-ID"].startswith(f"<notification-{row.pk}.")


def test_anymail_tags_and_metadata_reach_the_provider():
    from anymail.message import AnymailMessage

    api = ProviderAPI()
    try:
        anymail = {"RESEND_API_KEY": "re_test_0123456789abcdef", "RESEND_API_URL": api.url}
        with queue_in_front_of(RESEND), override_settings(ANYMAIL=anymail):
            message = AnymailMessage(
                subject="Order shipped",
                body="On its way",
                to=["ada@example.com"],
                tags=["shipping", "order"],
                metadata={"order_id": 42, "region": "eu"},
                headers={"X-Campaign": "spring"},
            )
            message.attach_alternative("<p>On its way</p>", "text/html")
            message.send()
            (row,) = Notification.objects.all()
            assert row.message["anymail"] == {
                "tags": ["shipping", "order"],
                "metadata": {"order_id": 42, "region": "eu"},
            }

            assert run_tick().counts()["succeeded"] == 1
    finally:
        api.close()

    (request,) = api.requests
    sent = request.json
    assert (sent["subject"], sent["text"], sent["html"]) == ("Order shipped", "On its way", "<p>On its way</p>")
    assert json.loads(sent["headers"]["X-Tags"]) == ["shipping", "order"]
    assert json.loads(sent["headers"]["X-Metadata"]) == {"order_id": 42, "region": "eu"}
    assert sent["headers"]["X-Campaign"] == "spring"
    assert request.headers["idempotency-key"] == str(row.firing_id)


def test_send_messages_returns_the_number_queued_and_a_bad_message_raises_at_once():
    backend = QueuedEmailBackend(priority="high")
    good = [EmailMultiAlternatives("A", "a", to=["a@example.com"]), EmailMultiAlternatives("B", "b", to=["b@x.org"])]
    assert backend.send_messages([]) == 0
    assert backend.send_messages(good) == 2
    assert sorted(Notification.objects.values_list("subject", "priority")) == [("A", "high"), ("B", "high")]

    bad = EmailMultiAlternatives("C", "c", to=["not an address"])
    with pytest.raises(Exception, match="Enter a valid email address"):
        backend.send_messages([bad])
    assert QueuedEmailBackend(fail_silently=True).send_messages([bad]) == 0
    assert Notification.objects.count() == 2


def test_the_queues_own_message_id_replaces_one_the_message_brought():
    message = EmailMultiAlternatives("A", "a", to=["a@example.com"], headers={"Message-ID": "<mine@x>", "X-A": "1"})
    QueuedEmailBackend().send_messages([message])

    (row,) = Notification.objects.all()
    assert row.headers == {"X-A": "1"}


def test_rows_wait_for_the_commit_of_the_database_they_live_in(queued_smtp):
    started = timezone.now()
    with transaction.atomic():
        send_mail("Hi", "Body", None, ["ada@example.com"])
        send_mail("Hi again", "Body", None, ["grace@example.com"])
    rows = list(Notification.objects.order_by("id"))
    assert [r.subject for r in rows] == ["Hi", "Hi again"]
    assert all(r.next_fire_at >= started and r.channels == ["email"] for r in rows)
