"""The attachment bytes a tick holds at once are bounded (issue 34 finding 7).

`notifications.channels.email.inflight.ByteBudget` is tested as logic (no timing: a take
that cannot fit is asked with no wait), and through a tick whose mail backend notes the
bytes held while each message goes out. Peak memory is measured by
bench/attachments_memory.py, not here.
"""

from __future__ import annotations

import threading

import pytest
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels.email import inflight
from notifications.channels.email.inflight import ByteBudget
from notifications.models import DeliveryAttempt, Notification
from notifications.models.attachments import Attachment

EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Report", "body": "Attached."}


# --- the budget's logic -------------------------------------------------------------------


def test_takes_what_fits_and_refuses_what_does_not():
    budget = ByteBudget(100)
    assert budget.take(60, timeout=0) == 60
    assert budget.take(30, timeout=0) == 30
    assert budget.take(20, timeout=0) is None  # 110 > 100
    assert budget.taken == 90
    budget.give_back(60)
    assert budget.take(20, timeout=0) == 20
    assert budget.taken == 50


def test_a_request_larger_than_the_budget_goes_alone():
    budget = ByteBudget(100)
    assert budget.take(10, timeout=0) == 10
    assert budget.take(500, timeout=0) is None  # waits until nothing else is held
    budget.give_back(10)
    assert budget.take(500, timeout=0) == 100  # the whole budget
    assert budget.take(1, timeout=0) is None
    budget.give_back(100)
    assert budget.taken == 0


def test_a_waiting_taker_gets_its_turn_when_bytes_come_back():
    budget = ByteBudget(100)
    budget.take(100, timeout=0)
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(budget.take(40, timeout=60)))
    waiter.start()
    budget.give_back(100)
    waiter.join(60)
    assert got == [40]


def test_holding_gives_back_even_when_the_block_raises():
    budget = ByteBudget(100)
    with pytest.raises(RuntimeError), budget.holding(70, timeout=0) as ready:
        assert ready and budget.taken == 70
        raise RuntimeError
    assert budget.taken == 0


# --- through a tick -------------------------------------------------------------------------


class NotingBackend(LocmemBackend):
    """locmem, noting the attachment bytes this process's budget holds as each message goes out."""

    held: list[int] = []

    def send_messages(self, messages):
        type(self).held.append(inflight.budget().taken)
        return super().send_messages(messages)


@pytest.mark.django_db(transaction=True)
def test_a_tick_never_holds_more_attachment_bytes_than_the_budget():
    NotingBackend.held = []
    with override_settings(
        NOTIFICATIONS_EMAIL_BACKEND="tests.test_attachment_memory.NotingBackend",
        NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT=250,
        NOTIFICATIONS_CONCURRENCY=8,
    ):
        for i in range(8):
            schedule(**EMAIL, attachments=[Attachment(f"r{i}.bin", bytes(100))])
        run_tick(now=timezone.now())
    assert not Notification.objects.exists()  # all sent
    assert len(NotingBackend.held) == 8
    assert max(NotingBackend.held) <= 250  # two rows' attachments at most, never three


@pytest.mark.django_db(transaction=True)
def test_a_row_whose_turn_does_not_come_waits_without_spending_a_retry():
    budget_setting = {"NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT": 1000, "NOTIFICATIONS_CHANNEL_TIMEOUT": 0.2}
    with override_settings(**budget_setting):
        row = schedule(**EMAIL, attachments=[Attachment("r.bin", bytes(100))])
        full = inflight.budget()
        taken = full.take(1000, timeout=0)  # another send holds the whole budget
        try:
            now = timezone.now()
            report = run_tick(now=now, budget=0)
        finally:
            full.give_back(taken)
    row.refresh_from_db()
    assert report.counts()["deferred"] == 1
    assert (row.error_count, row.dead_lettered_at) == (0, None)
    assert row.next_fire_at <= now  # still due: its turn comes at the next tick
    assert DeliveryAttempt.objects.get().error.startswith("email: its attachments waited 0.2s for their turn")


@pytest.mark.django_db(transaction=True)
def test_a_webhook_sent_beside_an_email_that_waited_is_not_sent_again(webhook_server):
    with override_settings(NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT=1000, NOTIFICATIONS_CHANNEL_TIMEOUT=0.2):
        row = schedule(
            **{**EMAIL, "channels": ["email", "webhook"]},
            webhook_url=webhook_server.url(),
            attachments=[Attachment("r.bin", bytes(100))],
        )
        full = inflight.budget()
        taken = full.take(1000, timeout=0)
        try:
            run_tick(now=timezone.now(), budget=0)
        finally:
            full.give_back(taken)
        row.refresh_from_db()
        assert (row.pending_channels, row.error_count, row.failed_channels) == (["email"], 0, None)
        assert len(webhook_server.received) == 1

        run_tick(now=timezone.now())  # the email's turn: only it goes

    assert not Notification.objects.exists()
    assert len(webhook_server.received) == 1
    from django.core import mail

    assert len(mail.outbox) == 1
