"""A tick killed before its write-back leaves no inbox message, and the firing's next
delivery leaves exactly one: the message is committed with the row's outcome."""

from __future__ import annotations

import signal
import time

import pytest
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import InboxMessage, Notification
from tests.support.servers import Reply
from tests.test_crash import CHILD_SETTINGS

ROWS = 3


@pytest.mark.slow
# No PgBouncer copy: the child claims and dies before any write-back and the test's own tick
# redelivers (connected directly); a child's claim and death through the pooler are
# test_crash.test_killed_tick_rows_come_back_to_a_later_runtick_process's.
@pytest.mark.multi_process(pooled=False)
@pytest.mark.django_db(transaction=True)
def test_a_tick_killed_before_its_write_back_leaves_no_message_then_exactly_one(make_row, webhook_server, children):
    webhook_server.reply = Reply(behaviour="hang")  # the firing's webhook is in flight when the tick dies
    rows = [
        make_row(channels=["inbox", "webhook"], recipient=f"user:{n}", subject="Hi", webhook_url=webhook_server.url())
        for n in range(ROWS)
    ]

    child = children.start(settings=CHILD_SETTINGS)
    webhook_server.wait_for(ROWS, timeout=60)  # every row claimed, its inbox message made in memory
    child.send(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    assert not InboxMessage.objects.exists()  # nothing was written back

    webhook_server.reply = Reply()
    lease_ends = max(Notification.objects.values_list("claimed_until", flat=True))
    # Real time must pass: the dead tick's claims end only when their lease runs out.
    time.sleep(max((lease_ends - timezone.now()).total_seconds(), 0) + 0.2)
    assert run_tick().counts()["succeeded"] == ROWS

    found = sorted(InboxMessage.objects.values_list("recipient", "firing_id"))
    assert found == sorted((row.recipient, row.firing_id) for row in rows)
