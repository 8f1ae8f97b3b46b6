"""Recipients written with a display name (`Ada <ada@example.com>`, `"Doe, John" <john@...>`).

Django's SMTP backend hands smtplib each recipient as written, so the server's answers per
recipient come back keyed by the whole `Name <address>`. They are read by the address: a
refused one is suppressed and named as `<ada@example.com>`, a greylisted one is retried
(alone), and the admin's change page saves such rows as they are. aiosmtpd is the real
mail server.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import Notification, Suppression
from notifications.models.addresses import AddressesFormField, split
from tests.support.admin_forms import change_form, change_url, inputs
from tests.support.mail_doubles import schedule_email

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
AFTER_BACKOFF = NOW + timedelta(seconds=61)
NAMED = ["Ada Lovelace <ada@example.com>", '"Doe, John" <john@example.com>']


@pytest.mark.parametrize("named", NAMED)
def test_a_refused_recipient_with_a_display_name_is_suppressed_by_its_address(smtp, named):
    address = named.rsplit("<", 1)[1].rstrip(">")
    smtp.refuse(address)
    row = schedule_email(NOW, email_to=[named])

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.dead_lettered_at is not None
    assert row.last_error == f"email: 550 5.1.1 <{address}>: No such user here"
    assert list(Suppression.objects.values_list("address", flat=True)) == [address]

    # The next message to that recipient leaves it out: it never reaches the server again.
    again = schedule_email(NOW, email_to=[named], subject="Again")
    run_tick(now=NOW)
    again.refresh_from_db()
    assert again.last_error == "email: all recipients suppressed"
    assert not smtp.delivered


def test_one_refused_named_recipient_among_several_is_suppressed_and_the_rest_get_it(smtp):
    smtp.refuse("ada@example.com")
    schedule_email(NOW, email_to=["Ada <ada@example.com>", "grace@example.com"])

    assert run_tick(now=NOW).counts()["succeeded"] == 1

    assert [d.rcpt_tos for d in smtp.delivered] == [["grace@example.com"]]
    assert list(Suppression.objects.values_list("address", flat=True)) == ["ada@example.com"]


def test_a_greylisted_named_recipient_is_sent_the_retry_alone(smtp):
    smtp.refuse("ada@example.com", "451 4.7.1 Greylisted, please try again later")
    row = schedule_email(NOW, email_to=["Ada <ada@example.com>", "grace@example.com"])

    run_tick(now=NOW)
    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "email: SMTP 451 for 1 of 2 recipients")

    smtp.rcpt_replies.clear()  # greylisting lets the retry through
    assert run_tick(now=AFTER_BACKOFF).counts()["succeeded"] == 1

    first, retry = smtp.delivered
    assert (first.rcpt_tos, retry.rcpt_tos) == (["grace@example.com"], ["ada@example.com"])
    assert retry.message["To"] == "Ada <ada@example.com>"  # written as the row has it
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert not Suppression.objects.exists()


def test_the_admin_saves_a_row_with_named_recipients_as_it_is(admin_client):
    row = schedule_email(NOW + timedelta(days=1), email_to=[NAMED[0]], email_cc=[NAMED[1]])
    page = admin_client.get(change_url(row))
    shown = {f["name"]: f.get("value") for f in inputs(page) if f.get("name") in ("email_to", "email_cc")}

    response = admin_client.post(change_url(row), change_form(row, **shown, subject="Edited"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Notification.objects.get(pk=row.pk)
    assert (stored.email_to, stored.email_cc, stored.subject) == (NAMED[0], [NAMED[1]], "Edited")


def test_the_address_box_splits_between_addresses_never_inside_one():
    listed = AddressesFormField(required=False)

    assert listed.clean(", ".join(NAMED)) == NAMED
    assert listed.clean(f"{NAMED[1]};\nlinus@example.com ken@example.com") == [
        NAMED[1],
        "linus@example.com",
        "ken@example.com",
    ]
    assert not listed.has_changed(NAMED, listed.prepare_value(NAMED))  # shown and posted back: unchanged
    assert AddressesFormField(single=True).clean(NAMED[0]) == NAMED[0]


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        (
            '"Doe \\" Jr, John" <john@example.com>, ada@example.com',
            ['"Doe \\" Jr, John" <john@example.com>', "ada@example.com"],
        ),
        ('"unclosed, ada@example.com', ['"unclosed, ada@example.com']),  # runs to the end, then refused
        ('\\"' * 50_000, ['\\"' * 50_000]),  # each quote left open: one pass, not one per quote
    ],
)
def test_an_escaped_or_unclosed_quote_never_splits_inside_it(text, pieces):
    assert split(text) == pieces
