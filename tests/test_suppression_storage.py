"""The suppression list against a real SMTP server: what it can store, and one spelling per mailbox.

- An address the list cannot hold (validate_email takes 320 characters, the column 254) is
  left out of it: the refusal never undoes the write-back of the batch it came with, so
  the batch is not sent again at every lease.
- An address is suppressed in every spelling of its mailbox: the server refuses the
  IDNA form Django's SMTP backend sends (`xn--...`), later rows spell it in Unicode or
  upper case, and none of them goes out again.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from notifications import store
from notifications.api import run_tick
from notifications.models import Notification, Suppression
from notifications.models.addresses import normalise
from tests.support.mail_doubles import schedule_email

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)

# 271 characters: every label at most 63, so validate_email takes it (it allows 320).
LONG = "a" * 64 + "@" + ".".join(["b" * 63, "c" * 63, "d" * 63, "e" * 10, "com"])


def test_a_refused_address_too_long_to_store_leaves_the_batch_written_back(smtp):
    assert len(LONG) > 254
    smtp.refuse(LONG)
    long_row = schedule_email(NOW, email_to=[LONG, "ada@example.com"])
    others = [schedule_email(NOW, email_to=f"user{n}@example.com") for n in range(20)]

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 21
    assert not Notification.objects.filter(pk__in=[long_row.pk, *(r.pk for r in others)]).exists()
    assert len(smtp.delivered) == 21
    # Nothing is stored that the column cannot hold; nothing is sent again.
    assert not Suppression.objects.exists()
    assert run_tick(now=NOW).claimed == 0
    assert len(smtp.delivered) == 21


def test_a_suppression_that_cannot_be_stored_never_rolls_back_the_caller(on_postgres):
    store.suppress([(LONG, "SMTP 550"), ("ok@example.com", "SMTP 550 \x00 \ud800")])

    (stored,) = Suppression.objects.all()
    assert stored.address == "ok@example.com"
    assert "\x00" not in stored.reason


def test_an_address_refused_in_its_idna_spelling_is_suppressed_in_every_spelling(smtp):
    smtp.refuse("bounce@xn--exmple-cua.com")  # what Django's SMTP backend sends for exämple.com
    schedule_email(NOW, email_to="bounce@exämple.com")

    run_tick(now=NOW)

    assert list(Suppression.objects.values_list("address", flat=True)) == ["bounce@xn--exmple-cua.com"]
    smtp.rcpt_replies.clear()  # the server would take it now: the list alone keeps it out
    spellings = ["bounce@exämple.com", "BOUNCE@EXÄMPLE.COM", "Bounce@Xn--Exmple-Cua.Com"]
    rows = [schedule_email(NOW, email_to=address) for address in spellings]

    report = run_tick(now=NOW)

    assert report.counts()["dead_lettered"] == 3
    assert smtp.delivered == []
    for row in rows:
        row.refresh_from_db()
        assert row.last_error == "email: all recipients suppressed"


def test_an_address_suppressed_in_unicode_keeps_its_idna_spelling_out(smtp):
    # As django-anymail's tracking signal would report it: the Unicode spelling.
    store.suppress([("Bounce@EXÄMPLE.com", "Resend: bounced")])
    row = schedule_email(NOW, email_to=["bounce@xn--exmple-cua.com", "ada@example.com"])

    run_tick(now=NOW)

    assert not Notification.objects.filter(pk=row.pk).exists()
    (delivered,) = smtp.delivered
    assert delivered.rcpt_tos == ["ada@example.com"]


# 190 characters as typed, 255 once its domain is IDNA-encoded (every label then at most 63).
EXPANDS = (
    "a" * 64
    + "@"
    + ".".join(
        [
            "ùüáéóòóûçëéóäç",
            "úäÿòáàùéãäääûõäçýëñäôàò",
            "õàåàýàòâäñõûéêûâéãÿôñôýëâ",
            "ùóôçùöóàçñýêåõÿýåüò",
            "êôçåóäóöâÿúùù",
            "ûêêôàäëõõàçôåùåòáýõúäç",
            "com",
        ]
    )
)


def test_an_address_too_long_once_encoded_is_an_error_on_the_admin_add_page(admin_client):
    from django.urls import reverse

    assert len(EXPANDS) <= 254 < len(normalise(EXPANDS))

    response = admin_client.post(reverse("admin:notifications_suppression_add"), {"address": EXPANDS, "reason": "x"})

    assert response.status_code == 200  # the form again, not a 500 (nor a value the column cannot hold)
    assert "at most 254 characters" in response.context["adminform"].form.errors["address"][0]
    assert not Suppression.objects.exists()
