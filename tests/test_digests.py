"""Digests: rows of one recipient and digest key go out together, as one firing, at the
end of a window (SPEC "Version 4 / Digests"). Time moves by `run_tick(now=...)`."""

from __future__ import annotations

import io
import json
import threading
import traceback
import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from notifications import outcomes, services, store
from notifications.api import cancel, run_tick, schedule
from notifications.models import Notification
from notifications.models.states import State
from notifications.testing import capture_notifications

pytestmark = pytest.mark.django_db

URL = "https://hooks.example.com/digest"
WINDOW = 600  # seconds


def digest_row(n: int, *, at, recipient: str = "user:42", key: str = "comments", window: int = WINDOW, **fields):
    fields.setdefault("channels", ["webhook"])
    if "webhook" in fields["channels"]:
        fields.setdefault("webhook_url", URL)
    return schedule(recipient=recipient, digest_key=key, digest_window=window, payload={"n": n}, fire_at=at, **fields)


def email_digest_row(n: int, *, at, **fields):
    fields.setdefault("channels", ["email"])
    fields.setdefault("subject", "{{ count }} new comments")
    fields.setdefault("body", "{% for item in items %}#{{ item.n }} {% endfor %}(first: {{ n }})")
    return digest_row(n, at=at, email_to="ada@example.com", **fields)


# --- validation ----------------------------------------------------------------------------


def test_a_recurring_row_with_a_digest_key_is_refused_on_digest_key():
    with pytest.raises(ValidationError) as caught:
        schedule(
            channels=["webhook"],
            webhook_url=URL,
            recurrence_rule="0 9 * * *",
            digest_key="comments",
            digest_window=60,
        )
    assert "digest_key" in caught.value.message_dict


def test_a_digest_key_needs_a_window_and_a_window_needs_a_key():
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=URL, digest_key="comments")
    assert "digest_window" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=URL, digest_window=60)
    assert "digest_key" in caught.value.message_dict


@pytest.mark.parametrize("window", [0, -5])
def test_a_window_must_be_positive(window):
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=URL, digest_key="comments", digest_window=window)
    assert "digest_window" in caught.value.message_dict


def test_a_digest_key_longer_than_200_characters_is_refused():
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url=URL, digest_key="k" * 201, digest_window=60)
    assert "digest_key" in caught.value.message_dict


def test_schedule_takes_the_digest_fields():
    row = digest_row(1, at=timezone.now())
    row.refresh_from_db()
    assert (row.recipient, row.digest_key, row.digest_window) == ("user:42", "comments", WINDOW)


# --- one firing at the end of the window ------------------------------------------------------


def test_rows_due_inside_the_window_go_out_as_one_webhook_when_it_ends():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0 + timedelta(seconds=n * 60)) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)  # the first is due: it opens a window of 10 minutes
        captured.tick(now=t0 + timedelta(seconds=130))  # the others join
        captured.tick(now=t0 + timedelta(seconds=WINDOW - 1))  # not yet
        assert captured.webhooks == []
        assert Notification.objects.count() == 3
        report = captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert report.counts()["succeeded"] == 1
        assert len(captured.webhooks) == 1
        body = captured.webhooks[0].json
        assert body["type"] == "notification.digest"
        assert body["count"] == 3
        assert body["items"] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert captured.webhooks[0].verify()
    assert not Notification.objects.filter(pk__in=[r.pk for r in rows]).exists()


def test_a_row_due_after_the_window_ends_opens_the_next_digest():
    t0 = timezone.now()
    digest_row(0, at=t0)
    digest_row(1, at=t0 + timedelta(seconds=WINDOW + 30))
    with capture_notifications() as captured:
        captured.tick(now=t0)
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert [w.json["items"] for w in captured.webhooks] == [[{"n": 0}]]
        captured.tick(now=t0 + timedelta(seconds=WINDOW + 30))
        assert len(captured.webhooks) == 1  # its own window has just opened
        captured.tick(now=t0 + timedelta(seconds=2 * WINDOW + 30))
        assert [w.json["items"] for w in captured.webhooks] == [[{"n": 0}], [{"n": 1}]]
    assert not Notification.objects.exists()


def test_a_late_tick_sends_what_was_due_in_each_window_in_that_tick():
    t0 = timezone.now()
    for n in range(4):
        digest_row(n, at=t0 + timedelta(seconds=n * 400))  # 0 and 1 in the first window, 2 and 3 in the next
    with capture_notifications() as captured:
        captured.tick(now=t0 + timedelta(hours=2))
        assert sorted(w.json["count"] for w in captured.webhooks) == [2, 2]
        items = sorted((w.json["items"] for w in captured.webhooks), key=lambda i: i[0]["n"])
    assert items == [[{"n": 0}, {"n": 1}], [{"n": 2}, {"n": 3}]]
    assert not Notification.objects.exists()


def test_groups_are_per_recipient_and_key():
    t0 = timezone.now()
    digest_row(0, at=t0, recipient="user:1")
    digest_row(1, at=t0, recipient="user:2")
    digest_row(2, at=t0, recipient="user:1", key="likes")
    digest_row(3, at=t0, recipient="user:1")
    with capture_notifications() as captured:
        captured.tick(now=t0)
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        items = sorted((w.json["items"] for w in captured.webhooks), key=lambda i: i[0]["n"])
    assert items == [[{"n": 0}, {"n": 3}], [{"n": 1}], [{"n": 2}]]


def test_plain_rows_beside_digests_go_out_as_before():
    t0 = timezone.now()
    digest_row(0, at=t0)
    plain = schedule(channels=["webhook"], webhook_url=URL, payload={"plain": True}, fire_at=t0)
    with capture_notifications() as captured:
        captured.tick(now=t0)
        assert [w.json["type"] for w in captured.webhooks] == ["notification.fired"]
        assert captured.webhooks[0].json["notification_id"] == plain.pk


@override_settings(NOTIFICATIONS_DIGEST_MAX_ITEMS=3)
def test_a_full_digest_goes_out_at_once_and_the_next_row_opens_another():
    t0 = timezone.now()
    for n in range(4):
        digest_row(n, at=t0)
    with capture_notifications() as captured:
        captured.tick(now=t0)
        assert [w.json["items"] for w in captured.webhooks] == [[{"n": 0}, {"n": 1}, {"n": 2}]]
        assert Notification.objects.count() == 1
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert [w.json["count"] for w in captured.webhooks] == [3, 1]


def test_email_templates_of_the_first_row_render_with_items_and_count():
    t0 = timezone.now()
    for n in range(3):
        email_digest_row(n, at=t0)
    with capture_notifications() as captured:
        captured.tick(now=t0)
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert len(captured.emails) == 1
        message = captured.emails[0]
    assert message.subject == "3 new comments"
    assert message.body == "#0 #1 #2 (first: 0)"


def test_a_digest_on_two_channels_is_one_message_on_each():
    t0 = timezone.now()
    for n in range(2):
        email_digest_row(n, at=t0, channels=["email", "webhook"], webhook_url=URL)
    with capture_notifications() as captured:
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert len(captured.emails) == 1
        assert len(captured.webhooks) == 1
    assert not Notification.objects.exists()


# --- settled as one ------------------------------------------------------------------------------


def test_a_failing_digest_retries_as_one_with_one_webhook_id_then_is_dead_lettered_as_one():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.respond(503)
        captured.tick(now=t0)
        report = captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert report.counts()["retried"] == 1
        states = {r.state(t0 + timedelta(seconds=WINDOW)) for r in Notification.objects.all()}
        assert states == {State.RETRYING}
        assert {r.error_count for r in Notification.objects.all()} == {1}
        captured.tick(now=t0 + timedelta(seconds=WINDOW + 60))
        captured.tick(now=t0 + timedelta(seconds=WINDOW + 60 + 300))
        assert len(captured.webhooks) == 3  # MAX_RETRIES attempts, each the whole digest
        assert len({w.message_id for w in captured.webhooks}) == 1
        assert all(w.json["count"] == 3 for w in captured.webhooks)
        dead = Notification.objects.filter(pk__in=[r.pk for r in rows])
        assert dead.count() == 3
        assert all(r.dead_lettered_at is not None for r in dead)

        # Requeueing one row of it sends the whole digest again, once, with the same id.
        captured.clear()
        captured.respond(200)
        result = services.requeue(Notification.objects.filter(pk=rows[1].pk))
        assert result.changed == 3
        captured.tick()
        assert len(captured.webhooks) == 1
        assert captured.webhooks[0].json["count"] == 3
    assert not Notification.objects.exists()


def test_cancelling_a_row_of_an_open_digest_takes_it_out():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
        assert cancel(rows[1]) is True
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert [w.json["items"] for w in captured.webhooks] == [[{"n": 0}, {"n": 2}]]


def test_cancelling_the_row_that_opened_the_digest_keeps_its_window():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0 + timedelta(seconds=n * 100)) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
        captured.tick(now=t0 + timedelta(seconds=200))
        assert cancel(rows[0]) is True
        captured.tick(now=t0 + timedelta(seconds=WINDOW - 1))
        assert captured.webhooks == []
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert [w.json["items"] for w in captured.webhooks] == [[{"n": 1}, {"n": 2}]]
    assert not Notification.objects.exists()


def test_rows_bulk_created_are_grouped_too():
    t0 = timezone.now()
    Notification.objects.bulk_create(
        [
            Notification(
                channels=["webhook"],
                webhook_url=URL,
                recipient="user:7",
                digest_key="k",
                digest_window=60,
                payload={"n": n},
                next_fire_at=t0,
            )
            for n in range(5)
        ]
    )
    with capture_notifications() as captured:
        captured.tick(now=t0 + timedelta(seconds=60))
        assert [w.json["count"] for w in captured.webhooks] == [5]


def test_a_bulk_created_recurring_row_with_a_digest_key_is_dead_lettered_saying_why():
    t0 = timezone.now()
    (row,) = Notification.objects.bulk_create(
        [
            Notification(
                channels=["webhook"],
                webhook_url=URL,
                recurrence_rule="0 9 * * *",
                digest_key="k",
                digest_window=60,
                next_fire_at=t0,
            )
        ]
    )
    with capture_notifications() as captured:
        captured.tick(now=t0)
        assert captured.webhooks == []
    row.refresh_from_db()
    assert row.dead_lettered_at is not None
    assert "digest_key" in row.last_error


def test_the_digest_state_and_open_digests():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(2)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
    assert {Notification.objects.get(pk=r.pk).state(t0) for r in rows} == {State.DIGEST}
    assert Notification.objects.in_state("digest", t0).count() == 2
    (digest,) = services.digests.open_digests(t0)
    assert digest["rows"] == 2
    assert digest["closes_at"] == t0 + timedelta(seconds=WINDOW)


# --- seen as one: admin, status, metrics ---------------------------------------------------------


CHANGELIST = "/admin/notifications/notification/"


def test_the_admin_shows_open_digests_and_a_digests_rows_from_any_of_them(admin_client):
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    other = digest_row(9, at=t0, recipient="user:9")
    with capture_notifications() as captured:
        captured.tick(now=t0)

    waiting = admin_client.get(CHANGELIST, {"state": "digest"})
    assert waiting.status_code == 200
    assert {r.pk for r in waiting.context["cl"].result_list} == {*(r.pk for r in rows), other.pk}
    page = waiting.content.decode()
    assert "digest of 3 rows" in page
    assert "digest of 1 row" in page
    assert "goes out" in page

    digest_id = Notification.objects.get(pk=rows[0].pk).digest_id
    group = admin_client.get(CHANGELIST, {"digest": str(digest_id)})
    assert {r.pk for r in group.context["cl"].result_list} == {r.pk for r in rows}
    opened = admin_client.get(CHANGELIST, {"digest": "open"})
    assert len(opened.context["cl"].result_list) == 4

    change = admin_client.get(f"{CHANGELIST}{rows[1].pk}/change/").content.decode()
    for row in rows:
        assert f"{CHANGELIST}{row.pk}/change/" in change
    assert f"?digest={digest_id}" in change


def test_a_forged_digest_id_in_the_admin_lists_nothing(admin_client):
    digest_row(0, at=timezone.now())
    response = admin_client.get(CHANGELIST, {"digest": "not-a-digest'--"})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def test_the_admin_requeue_action_requeues_the_whole_digest(admin_client):
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.respond(410)  # permanent: the digest is dead-lettered at once
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert Notification.objects.dead().count() == 3
        response = admin_client.post(CHANGELIST, {"action": "requeue", "_selected_action": [rows[2].pk]}, follow=True)
        assert response.status_code == 200
        assert Notification.objects.dead().count() == 0
        captured.clear()
        captured.respond(200)
        captured.tick()
        assert [w.json["count"] for w in captured.webhooks] == [3]
    assert not Notification.objects.exists()


def test_status_and_metrics_count_open_digests():
    from django.core.management import call_command

    from notifications.health import monitoring
    from notifications.health.queue import queue_health

    t0 = timezone.now()
    for n in range(3):
        digest_row(n, at=t0)
    digest_row(3, at=t0, recipient="user:9")
    with capture_notifications() as captured:
        captured.tick(now=t0)
    assert queue_health().open_digests == 2
    assert monitoring.read().open_digests == 2
    out = io.StringIO()
    call_command("notifications_status", stdout=out)
    assert "open digests: 2" in out.getvalue()


# --- two ticks never send a digest twice -----------------------------------------------------------

RACE_SETTINGS = {
    "NOTIFICATIONS_TICK_LIMIT": 7,  # small claims: each tick comes back for more while the others hold theirs
    "NOTIFICATIONS_CHANNEL_TIMEOUT": 10,
    "NOTIFICATIONS_CIRCUIT_BREAKER": {"failures": 0},
}


def race(ticks: int, now) -> list:
    """`ticks` ticks in threads, started together at `now`; their reports."""
    from django.db import connection

    gate = threading.Barrier(ticks, timeout=60)
    reports: list = []
    errors: list[str] = []

    def one() -> None:
        try:
            gate.wait()
            reports.append(run_tick(now=now))
        except BaseException:
            errors.append(traceback.format_exc())
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(ticks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, "\n".join(errors)
    assert len(reports) == ticks
    return reports


def delivered_rows(webhook_server) -> list[int]:
    """Every row (`payload["n"]`) in every digest the receiver got, as often as it got it."""
    return [item["n"] for r in webhook_server.received for item in json.loads(r.body)["items"]]


@pytest.mark.django_db(transaction=True)
def test_racing_ticks_send_each_digest_exactly_once(webhook_server):
    groups, per_group = 30, 4
    t0 = timezone.now()
    url = webhook_server.url()
    with override_settings(**RACE_SETTINGS):
        for g in range(groups):
            for i in range(per_group):
                digest_row(g * per_group + i, at=t0, recipient=f"user:{g}", webhook_url=url)
        run_tick(now=t0)  # every row files into its group's digest
        digests = set(Notification.objects.values_list("firing_id", flat=True))
        assert len(digests) == groups
        assert webhook_server.received == []

        reports = race(4, t0 + timedelta(seconds=WINDOW))

    arrived = webhook_server.webhook_ids()
    assert set(arrived) == {f"msg_{d}" for d in digests}  # each digest, none invented
    assert {i: n for i, n in arrived.items() if n != 1} == {}  # none twice
    assert sorted(delivered_rows(webhook_server)) == list(range(groups * per_group))
    assert sum(r.counts()["succeeded"] for r in reports) == groups
    assert not Notification.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_racing_ticks_filing_and_sending_lose_nothing_and_send_no_row_twice(webhook_server):
    groups, per_group = 25, 6
    t0 = timezone.now()
    url = webhook_server.url()
    Notification.objects.bulk_create(
        [
            Notification(
                channels=["webhook"],
                webhook_url=url,
                recipient=f"user:{g}",
                digest_key="comments",
                digest_window=60,
                payload={"n": g * per_group + i},
                next_fire_at=t0 - timedelta(seconds=120 - i),  # every window has ended
            )
            for g in range(groups)
            for i in range(per_group)
        ]
    )
    with override_settings(**RACE_SETTINGS):
        race(4, t0)
    assert sorted(delivered_rows(webhook_server)) == list(range(groups * per_group))  # each row once
    arrived = webhook_server.webhook_ids()
    assert {i: n for i, n in arrived.items() if n != 1} == {}
    assert not Notification.objects.exists()


def test_run_now_on_one_row_of_an_open_digest_sends_the_whole_digest():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
        services.run_now(rows[1], now=t0 + timedelta(seconds=5))
        captured.tick(now=t0 + timedelta(seconds=5))
        assert [w.json["count"] for w in captured.webhooks] == [3]
    assert not Notification.objects.exists()


def test_a_row_joining_while_its_digest_is_being_sent_goes_in_the_next_one():
    """The digest is claimed (a tick is sending it); a row of the group due before its
    window ended is filed meanwhile by another tick: it opens the next digest and is
    neither sent with the first nor deleted by its write-back."""
    from notifications.store import claims, digests

    t0 = timezone.now()
    first = [digest_row(n, at=t0) for n in range(2)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
    closes = t0 + timedelta(seconds=WINDOW)
    # A tick claims the digest at its end ...
    sending = claims.Claim(uuid.uuid4())
    digests.claim_into(sending, closes, 10, 600)
    (leader,) = sending.rows
    assert {r.pk for r in leader.digest_rows} == {r.pk for r in first}
    # ... while another files a row due just before the window ended.
    late = digest_row(7, at=closes - timedelta(seconds=1))
    other = claims.claim(closes, 10, 600)
    assert [r.pk for r in other.rows] == [late.pk]
    digests.file_due(other.rows, closes, other.token)
    late.refresh_from_db()
    assert late.digest_id not in (None, leader.digest_id)
    # The first digest succeeds: its rows go, the late one stays for its own window.
    outcome = outcomes.Outcome(leader, outcomes.Kind.SUCCEEDED, delete=True)
    store.save_outcomes([(sending.token, [outcome])], [])
    assert list(Notification.objects.values_list("pk", flat=True)) == [late.pk]


def test_a_partial_failure_parks_the_digest_as_one_and_requeue_resends_only_what_failed():
    t0 = timezone.now()
    rows = [email_digest_row(n, at=t0, channels=["email", "webhook"], webhook_url=URL) for n in range(2)]
    with capture_notifications() as captured:
        captured.respond(410)
        report = captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert report.counts()["partial"] == 1
        assert len(captured.emails) == 1
        parked = Notification.objects.filter(pk__in=[r.pk for r in rows])
        assert {r.state() for r in parked} == {State.PARTIAL}
        assert {r.last_error for r in parked} == {"partial: webhook"}

        captured.clear()
        captured.respond(200)
        services.requeue(Notification.objects.filter(pk=rows[0].pk))
        captured.tick()
        assert captured.emails == []
        assert [w.json["count"] for w in captured.webhooks] == [2]
    assert not Notification.objects.exists()


def test_a_channel_sees_the_digest_on_its_firing():
    from notifications.channels import Firing
    from notifications.store import claims, digests

    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
    claimed = claims.Claim(uuid.uuid4())
    digests.claim_into(claimed, t0 + timedelta(seconds=WINDOW), 10, 600)
    (leader,) = claimed.rows
    firing = Firing(leader, str(leader.firing_id), t0, ["webhook"])
    assert firing.is_digest
    assert [r.pk for r in firing.rows] == [r.pk for r in rows]
    assert firing.items == [{"n": 0}, {"n": 1}, {"n": 2}]
    plain = schedule(channels=["webhook"], webhook_url=URL, payload={"x": 1})
    assert Firing(plain, str(plain.firing_id), t0, ["webhook"]).items == [{"x": 1}]


# --- operator actions keep a digest whole ------------------------------------------------------


def test_a_select_all_requeue_keeps_a_digest_whole_across_its_chunks(admin_client, monkeypatch):
    """The admin requeues a select-all in chunks of ACTION_BATCH rows, a transaction each,
    and ticks run between them. A dead digest whose rows fall on both sides of a chunk's
    end is requeued in one chunk: no tick sends half of it."""
    from notifications.services import actions
    from tests.support.admin_forms import CHANGELIST

    t0 = timezone.now()
    later = t0 + timedelta(days=1)

    # Rows on either side of the digest's (ids) so that it straddles the first chunk's end.
    def healthy(n: int) -> None:  # rows of the selection the requeue skips (nothing failed)
        Notification.objects.bulk_create(
            [Notification(channels=["webhook"], webhook_url=URL, payload={}, next_fire_at=later) for _ in range(n)]
        )

    healthy(actions.ACTION_BATCH - 2)
    rows = [digest_row(n, at=t0) for n in range(4)]
    healthy(10)
    with capture_notifications() as captured:
        captured.respond(410)  # permanent: the digest is dead-lettered at once
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert Notification.objects.dead().count() == 4
        captured.clear()
        captured.respond(200)
        ticked = []

        def tick_between_chunks(held: float) -> None:
            ticked.append(captured.tick())

        monkeypatch.setattr(actions, "let_others_write", tick_between_chunks)
        response = admin_client.post(
            CHANGELIST, {"action": "requeue", "select_across": "1", "_selected_action": [rows[0].pk]}, follow=True
        )
        assert response.status_code == 200
        assert ticked  # a tick ran between the chunks
        captured.tick()
        assert [w.json["count"] for w in captured.webhooks] == [4]
    assert not Notification.objects.filter(pk__in=[r.pk for r in rows]).exists()


# --- pausing a row of a digest -----------------------------------------------------------------


def test_a_paused_row_leaves_its_digest_and_once_resumed_goes_in_a_new_one_with_its_own_webhook_id():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)  # the three join one digest
        services.pause(rows[1], now=t0 + timedelta(seconds=10))
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert [w.json["items"] for w in captured.webhooks] == [[{"n": 0}, {"n": 2}]]

        resumed = t0 + timedelta(seconds=WINDOW + 60)
        services.resume(rows[1], now=resumed)
        digest_row(3, at=resumed + timedelta(seconds=60))
        captured.tick(now=resumed)  # the resumed row opens a window of its own...
        captured.tick(now=resumed + timedelta(seconds=60))  # ...which the next row joins
        assert len(captured.webhooks) == 1
        captured.tick(now=resumed + timedelta(seconds=WINDOW))
        assert [w.json["items"] for w in captured.webhooks[1:]] == [[{"n": 1}, {"n": 3}]]
        # A new firing: a receiver that drops a webhook-id it has seen does not drop it.
        assert captured.webhooks[1].message_id != captured.webhooks[0].message_id
    assert not Notification.objects.exists()


def test_a_row_paused_and_resumed_while_its_digest_is_open_goes_out_with_it():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.tick(now=t0)
        services.pause(rows[1], now=t0 + timedelta(seconds=10))
        services.resume(rows[1], now=t0 + timedelta(seconds=20))
        captured.tick(now=t0 + timedelta(seconds=20))  # due again: it joins the open digest
        captured.tick(now=t0 + timedelta(seconds=WINDOW))
        assert [w.json["count"] for w in captured.webhooks] == [3]
    assert not Notification.objects.exists()


def test_a_row_paused_out_of_a_retrying_digest_is_sent_once_resumed_as_a_new_firing():
    t0 = timezone.now()
    rows = [digest_row(n, at=t0) for n in range(3)]
    with capture_notifications() as captured:
        captured.respond(503)
        captured.tick(now=t0)
        captured.tick(now=t0 + timedelta(seconds=WINDOW))  # fails: retried as one
        services.pause(rows[2], now=t0 + timedelta(seconds=WINDOW + 1))
        captured.respond(200)
        captured.tick(now=t0 + timedelta(days=1))  # the retry delivers the two others
        assert [w.json["count"] for w in captured.webhooks] == [3, 2]
        first_id = captured.webhooks[0].message_id
        resumed = t0 + timedelta(days=1, seconds=10)
        row = services.resume(rows[2], now=resumed)
        assert (row.error_count, row.last_error) == (0, None)
        captured.tick(now=resumed)
        captured.tick(now=resumed + timedelta(seconds=WINDOW))
        assert [w.json["items"] for w in captured.webhooks[2:]] == [[{"n": 2}]]
        assert captured.webhooks[2].message_id != first_id
    assert not Notification.objects.exists()
