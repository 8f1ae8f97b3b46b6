"""notifications.inbox: the lists, the counts and the marks' rules, as SPEC version 5 says."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications import inbox
from notifications.models import InboxMessage, Notification

pytestmark = pytest.mark.django_db


@pytest.fixture
def row():
    return Notification.objects.create(subject="s", recipient="user:1", email_to=["a@example.com"])


def add(row, recipient="user:1", minutes=0, category="", **state):
    return InboxMessage.objects.create(
        recipient=recipient,
        category=category,
        title=f"t{minutes}",
        notification=row,
        firing_id=uuid.uuid4(),
        created_at=timezone.now() + timedelta(minutes=minutes),
        **state,
    )


def test_lists_newest_first_by_state_and_category(row):
    now = timezone.now()
    old = add(row, minutes=0, category="news")
    new = add(row, minutes=1)
    read = add(row, minutes=2, read_at=now, seen_at=now)
    archived = add(row, minutes=3, archived_at=now, read_at=now, seen_at=now)
    add(row, recipient="user:2", minutes=4)
    assert list(inbox.messages("user:1")) == [new, old]
    assert list(inbox.messages("user:1", state="all")) == [read, new, old]
    assert list(inbox.messages("user:1", state="archived")) == [archived]
    assert list(inbox.messages("user:1", state="all", category="news")) == [old]
    with pytest.raises(ValueError, match="Unknown inbox state"):
        inbox.messages("user:1", state="everything")


def test_counts_leave_archived_out_in_one_query(row):
    now = timezone.now()
    add(row)
    add(row, seen_at=now)
    add(row, seen_at=now, read_at=now)
    add(row, seen_at=now, read_at=now, archived_at=now)
    add(row, recipient="user:2")
    with CaptureQueriesContext(connection) as queries:
        found = inbox.counts("user:1")
    assert found == {"unseen": 1, "unread": 2, "total": 3}
    assert len(queries) == 1
    assert inbox.counts("user:nobody") == {"unseen": 0, "unread": 0, "total": 0}


def test_read_sets_seen_and_counts_only_changes(row):
    message = add(row)
    assert inbox.mark("user:1", [str(message.id)], "read") == 1
    message.refresh_from_db()
    assert message.read_at and message.seen_at
    assert inbox.mark("user:1", [message.id], "read") == 0  # already read


def test_archived_sets_read_and_seen_keeping_earlier_times(row):
    seen_earlier = timezone.now() - timedelta(hours=1)
    message = add(row, seen_at=seen_earlier)
    assert inbox.mark("user:1", "all", "archived") == 1
    message.refresh_from_db()
    assert message.archived_at and message.read_at
    assert message.seen_at == seen_earlier


def test_unread_and_unarchived_clear_their_own_column_alone(row):
    now = timezone.now()
    message = add(row, seen_at=now, read_at=now, archived_at=now)
    assert inbox.mark("user:1", [message.id], "unarchived") == 1
    message.refresh_from_db()
    assert message.archived_at is None and message.read_at == now and message.seen_at == now
    assert inbox.mark("user:1", [message.id], "unread") == 1
    message.refresh_from_db()
    assert message.read_at is None and message.seen_at == now


def test_another_recipients_ids_change_nothing_like_unknown_ones(row):
    theirs = add(row, recipient="user:2")
    assert inbox.mark("user:1", [theirs.id], "read") == 0
    assert inbox.mark("user:1", [uuid.uuid4(), "not-an-id", 7], "read") == 0
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_all_marks_only_the_recipients_own(row):
    mine = [add(row), add(row, minutes=1)]
    theirs = add(row, recipient="user:2")
    assert inbox.mark("user:1", "all", "seen") == 2
    assert all(m.seen_at for m in InboxMessage.objects.filter(id__in=[m.id for m in mine]))
    theirs.refresh_from_db()
    assert theirs.seen_at is None


@pytest.mark.parametrize("ids, state", [(["x"], "opened"), ("some", "read"), (None, "read")])
def test_bad_marks_are_refused(row, ids, state):
    with pytest.raises(ValueError):
        inbox.mark("user:1", ids, state)
