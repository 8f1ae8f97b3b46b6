"""MariaDB/MySQL: multi-row INSERTs fit the server's `max_allowed_packet` (issue 45 #8).

A 1,000-message newsletter of 20 KB each (20 MB, over the default 16 MiB packet) queued
through QueuedEmailBackend is 1,000 rows at commit; `schedule_many` splits its INSERT by
the packet the server announces, read once per connection."""

from __future__ import annotations

import pytest
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction

from notifications import databases
from notifications.api import schedule_many
from notifications.models import Notification
from tests.support.mail_servers import SMTP_BACKEND, queue_in_front_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="max_allowed_packet is MariaDB/MySQL's"),
]
# Quotes and backslashes: each is sent as two bytes, so the rows' text is longer than their length.
BODY = ("Quarterly news: 'quoted' \\ and plain text. " * 460)[:20_000]


def test_a_newsletter_over_the_packet_size_is_queued_whole():
    assert databases.statement_bytes_limit(connection) <= 16 * 1024 * 1024  # the server's, not ours
    messages = [EmailMessage("News", BODY, None, [f"reader{n}@example.com"]) for n in range(1000)]
    with queue_in_front_of(SMTP_BACKEND, host="127.0.0.1", port=1, timeout=5), transaction.atomic():
        assert get_connection().send_messages(messages) == 1000
    assert Notification.objects.count() == 1000
    assert set(Notification.objects.values_list("body", flat=True)) == {BODY}


def test_schedule_many_splits_by_the_packet_it_read_once_per_connection(django_assert_max_num_queries):
    rows = [
        {"channels": ["email"], "email_to": f"r{n}@example.com", "subject": "Hi", "body": BODY} for n in range(1000)
    ]
    databases.statement_bytes_limit(connection)  # read for this connection: not again
    with django_assert_max_num_queries(12) as captured:
        schedule_many(rows)
    assert Notification.objects.count() == 1000
    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) >= 2  # 40 MB of escaped text at most: more than one packet
    assert not any("max_allowed_packet" in q["sql"] for q in captured.captured_queries)
