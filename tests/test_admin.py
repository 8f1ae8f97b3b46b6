"""The admin changelist, change page and delivery history, through Django's test client."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from notifications.api import requeue, run_tick
from notifications.models import DeliveryAttempt, Notification
from tests.support.admin_forms import add_form, change_form, change_url
from tests.support.queue_states import SECRET, make, one_of_each

CHANGELIST = "/admin/notifications/notification/"
ATTEMPTS = "/admin/notifications/deliveryattempt/"


def listed_ids(response) -> set[int]:
    """Row ids in the changelist's result table (from the action checkboxes)."""
    html = response.content.decode()
    return {int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', html)}


# --- changelist ------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["due", "scheduled", "retrying", "partial", "dead", "parked"])
def test_state_filter_lists_exactly_the_rows_in_that_state(admin_client, state):
    rows = one_of_each()

    response = admin_client.get(CHANGELIST, {"state": state})

    assert response.status_code == 200
    assert listed_ids(response) == {rows[state].pk}


def test_state_filter_offers_the_five_spec_values(admin_client):
    one_of_each()
    html = admin_client.get(CHANGELIST).content.decode()
    for value in ["due", "scheduled", "retrying", "partial", "dead"]:
        assert f"?state={value}" in html


def test_unfiltered_changelist_lists_every_row(admin_client):
    rows = one_of_each()
    assert listed_ids(admin_client.get(CHANGELIST)) == {r.pk for r in rows.values()}


def test_channel_and_schedule_filters(admin_client):
    email_only = make("scheduled", channels=["email"], webhook_url="")
    webhook_only = make("scheduled", channels=["webhook"], email_to="")
    both = make("scheduled")
    recurring = make("scheduled", channels=["email"], recurrence_rule="0 9 * * 1-5", timezone="Europe/Berlin")

    assert listed_ids(admin_client.get(CHANGELIST, {"channel": "email"})) == {email_only.pk, both.pk, recurring.pk}
    assert listed_ids(admin_client.get(CHANGELIST, {"channel": "webhook"})) == {webhook_only.pk, both.pk}
    assert listed_ids(admin_client.get(CHANGELIST, {"schedule": "recurring"})) == {recurring.pk}
    assert listed_ids(admin_client.get(CHANGELIST, {"schedule": "one-shot"})) == {
        email_only.pk,
        webhook_only.pk,
        both.pk,
    }
    # Filters combine: dead letters of the webhook channel.
    dead = make("dead")
    assert listed_ids(admin_client.get(CHANGELIST, {"state": "dead", "channel": "webhook"})) == {dead.pk}


@pytest.mark.parametrize(
    ("term", "expected"),
    [("grace@example.org", "email"), ("hooks.example.net", "webhook"), ("HTTP 410", "error")],
)
def test_search_on_recipient_url_and_error(admin_client, term, expected):
    rows = {
        "email": make("scheduled", email_to="grace@example.org"),
        "webhook": make("scheduled", webhook_url="https://hooks.example.net/in"),
        "error": make("dead"),
    }
    assert listed_ids(admin_client.get(CHANGELIST, {"q": term})) == {rows[expected].pk}


def test_date_hierarchy_on_next_fire_at(admin_client):
    in_march = make("scheduled")
    Notification.objects.filter(pk=in_march.pk).update(next_fire_at=datetime(2031, 3, 5, 9, tzinfo=UTC))
    make("scheduled")

    response = admin_client.get(CHANGELIST, {"next_fire_at__year": 2031, "next_fire_at__month": 3})

    assert listed_ids(response) == {in_march.pk}


def test_columns_show_target_host_and_path_schedule_and_state_never_query_or_credentials(admin_client):
    row = make("dead", recurrence_rule="0 9 * * *", timezone="Europe/Berlin")
    slack = make("scheduled")  # a URL with credentials can only come from raw SQL: validation refuses it
    Notification.objects.filter(pk=slack.pk).update(
        webhook_url="https://user:pw@Hooks.Example.com:8443/services/T0AB12/B0CD34/a1b2c3d4e5f6g7h8i9j0k1l2?x=1#f"
    )
    html = admin_client.get(CHANGELIST).content.decode()

    # The address and the host may wrap (a phone) only after "@" and ".".
    assert '<span class="nq-clip" title="email: dead@example.com">dead@<wbr>example.<wbr>com</span>' in html
    # Host and path (so rows to one host tell apart): the host whole, the path's end beside it.
    assert (
        '<span class="nq-clip nq-target" title="webhook: dead.example.com/hooks/secret-path">'
        '<span class="nq-host">dead.<wbr>example.<wbr>com</span>'
        '<span class="nq-path"><bdi dir="ltr">/hooks/secret-path</bdi>'
    ) in html
    assert 'title="webhook: hooks.example.com:8443/services/T0AB12/B0CD34/…"' in html  # a token in the path is masked
    assert "token=abc" not in html and "x=1" not in html and "user:pw" not in html and "a1b2c3" not in html
    assert "0 9 * * * (Europe/Berlin)" in html
    # The state and the reason side by side, the reason whole on hover.
    assert (
        '<span class="nq-status" title="webhook: HTTP 410"><span class="nq-state nq-state-dead">Dead letter</span>'
        " webhook: HTTP 410</span>"
    ) in html
    assert f'href="{change_url(row)}' in html and f'href="{change_url(slack)}' in html


def test_times_are_relative_with_the_exact_time_on_hover(admin_client, admin_user, time_machine):
    time_machine.move_to(datetime(2030, 1, 7, 12, 0, 0, tzinfo=UTC), tick=False)
    admin_client.force_login(admin_user)  # the fixture's session would have expired by then
    row = make("retrying")  # next attempt in a minute
    Notification.objects.filter(pk=row.pk).update(
        next_fire_at=datetime(2030, 1, 7, 12, 4, 10, tzinfo=UTC),
        last_fired_at=datetime(2030, 1, 7, 11, 59, 48, tzinfo=UTC),
    )
    html = admin_client.get(CHANGELIST).content.decode()

    assert (
        '<time class="nq-moment" datetime="2030-01-07T12:04:10+00:00" title="2030-01-07 12:04:10 UTC">in 4 min</time>'
        in html
    )
    assert 'title="2030-01-07 11:59:48 UTC">12 s ago</time>' in html
    assert '<span class="nq-tries" title="1 failed attempt">&times;1</span>' in html


def test_after_a_requeue_the_last_failure_stays_visible_until_a_delivery_succeeds(admin_client, webhook_server):
    row = make("dead", channels=["webhook"], email_to="", webhook_url=webhook_server.url())
    admin_client.post(CHANGELIST, {"action": "requeue", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert (row.last_error, row.previous_error) == (None, "webhook: HTTP 410")

    assert "previous: webhook: HTTP 410" in admin_client.get(CHANGELIST).content.decode()
    assert "Before the requeue: <code>webhook: HTTP 410</code>." in admin_client.get(change_url(row)).content.decode()

    run_tick()  # delivered: the row is gone, and so is its previous failure

    assert not Notification.objects.filter(pk=row.pk).exists()


def test_a_recurring_row_forgets_its_previous_failure_once_a_firing_delivers(db, webhook_server):
    row = make("dead", channels=["webhook"], email_to="", webhook_url=webhook_server.url(), recurrence_rule="0 9 * * *")
    requeue([row])
    row.refresh_from_db()
    assert row.previous_error == "webhook: HTTP 410"

    run_tick()

    row.refresh_from_db()
    assert (row.last_error, row.previous_error) == (None, None)


def test_hostile_last_error_is_escaped_everywhere(admin_client, webhook_server):
    # A row that reached the table without validation: the tick dead-letters it and its
    # error quotes the bad value. Another row carries a hostile error text directly.
    payload = "<script>alert('x')</script>"
    Notification.objects.bulk_create(
        [Notification(channels=[payload], email_to="a@example.com", next_fire_at=timezone.now())]
    )
    run_tick()
    from_tick = Notification.objects.get()
    assert payload in from_tick.last_error  # the raw text is stored as it came
    direct = make("dead")
    Notification.objects.filter(pk=direct.pk).update(last_error="webhook: HTTP 500 <img src=x onerror=alert(1)>")
    # A webhook receiver answering with a hostile body and reason: whatever of it reaches
    # the error text and the delivery history must stay text.
    from tests.support.servers import Reply

    webhook_server.reply = Reply(status=500, body=payload.encode(), headers={"Content-Type": "text/html"})
    hooked = make("due", channels=["webhook"], email_to="", webhook_url=webhook_server.url())
    run_tick()
    assert DeliveryAttempt.objects.filter(notification_id=hooked.pk).exists()

    pages = [
        admin_client.get(CHANGELIST),
        admin_client.get(CHANGELIST, {"state": "dead"}),
        admin_client.get(change_url(from_tick)),
        admin_client.get(change_url(direct)),
        admin_client.get(change_url(hooked)),
        admin_client.get(ATTEMPTS),
        admin_client.post(
            CHANGELIST, {"action": "purge", "_selected_action": [from_tick.pk, direct.pk]}
        ),  # the confirmation page
    ]
    shows_hostile_text = 0
    for page in pages:
        html = page.content.decode()
        assert page.status_code == 200
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        shows_hostile_text += "&lt;script&gt;alert" in html or "&lt;img src=x" in html
    assert shows_hostile_text == 5  # every page but the hooked row's and the history: the text, escaped


@pytest.mark.parametrize("page_size", [3, 60])
def test_changelist_query_count_does_not_grow_with_the_page(admin_client, page_size):
    """Session, user, 2 health and 2 flow queries, the charts, count, date-hierarchy bounds, rows: nothing per row."""
    for i in range(page_size // 3):
        make("dead", email_to=f"d{i}@example.com")
        make("partial", email_to=f"p{i}@example.com", recurrence_rule="0 9 * * *")
        make("scheduled", email_to=f"s{i}@example.com")
    run_tick()  # a tick record for the health header
    admin_client.get(CHANGELIST)  # warm caches (content types, permissions)

    with CaptureQueriesContext(connection) as unfiltered:
        response = admin_client.get(CHANGELIST)
    with CaptureQueriesContext(connection) as filtered:
        filtered_response = admin_client.get(CHANGELIST, {"state": "dead", "channel": "email"})

    assert len(listed_ids(response)) == page_size
    assert len(listed_ids(filtered_response)) == page_size // 3
    # Pinned: the same for 3 rows and for 60.
    assert len(unfiltered) == EXPECTED_CHANGELIST_QUERIES, "\n".join(q["sql"][:150] for q in unfiltered)
    assert len(filtered) == EXPECTED_FILTERED_QUERIES, [q["sql"] for q in filtered]


# session, user, health (aggregate + last tick), flow (open circuits + empty buckets), the
# activity charts (tick records of 24 h), count, page of rows, date hierarchy (bounds + years),
# and the inbox bell's counts in the header (the project's admin/base_site.html)
EXPECTED_CHANGELIST_QUERIES = 12
EXPECTED_FILTERED_QUERIES = 12


def test_health_header_shows_counts_oldest_due_and_last_tick(admin_client):
    make("dead")
    make("dead")
    make("partial")
    due = make("due")
    Notification.objects.filter(pk=due.pk).update(next_fire_at=timezone.now() - timedelta(minutes=7, seconds=5))

    stale_page = admin_client.get(CHANGELIST).content.decode()
    assert "No tick has ever finished: the cron line (manage.py runtick) is not running." in stale_page
    assert re.search(r'data-state="dead">2<', stale_page)
    assert re.search(r'data-state="partial">1<', stale_page)
    assert re.search(r'data-state="due">1<', stale_page)
    assert re.search(r'class="nq-oldest-due">due <time class="nq-moment" [^>]*>7 min ago</time><', stale_page)

    mail.outbox.clear()
    run_tick()  # delivers the due row (email ok, webhook refused: partial)
    fresh_page = admin_client.get(CHANGELIST).content.decode()
    assert "cron line" not in fresh_page
    assert re.search(r'class="nq-last-tick"><time class="nq-moment" [^>]*>(now|\d+ s ago)</time><', fresh_page)
    assert "claimed=1 succeeded=0 partial=1 retried=0 dead_lettered=0" in fresh_page
    assert re.search(r'data-state="partial">2<', fresh_page)
    # Two clicks to the dead letters: the header links each state to its filter.
    assert f'href="{CHANGELIST}?state=dead"' in fresh_page


def test_stale_warning_when_last_tick_is_older_than_three_minutes(admin_client):
    run_tick()
    from notifications.models import TickRun

    TickRun.objects.update(finished_at=timezone.now() - timedelta(minutes=4))
    html = admin_client.get(CHANGELIST).content.decode()
    assert "No tick has finished in the last 3m (the last one 4m" in html
    assert "the cron line (manage.py runtick) is not running" in html


# --- change page -------------------------------------------------------------------------


def test_change_page_shows_next_five_occurrences_in_zone_and_utc_across_dst(admin_client, admin_user, time_machine):
    row = make("scheduled", channels=["email"], recurrence_rule="0 9 * * *", timezone="Europe/Berlin")
    # Five days straddling the spring-forward change (2030-03-31): +0100 then +0200.
    time_machine.move_to(datetime(2030, 3, 28, 12, tzinfo=UTC), tick=False)
    admin_client.force_login(admin_user)  # the fixture's session would have expired by then

    html = admin_client.get(change_url(row)).content.decode()

    assert "Next 5 occurrences" in html
    assert "<th>Europe/Berlin</th><th>UTC</th>" in html
    for local, utc in [
        ("2030-03-29 09:00:00 CET (+0100)", "2030-03-29 08:00:00 UTC"),
        ("2030-03-30 09:00:00 CET (+0100)", "2030-03-30 08:00:00 UTC"),
        ("2030-03-31 09:00:00 CEST (+0200)", "2030-03-31 07:00:00 UTC"),
        ("2030-04-01 09:00:00 CEST (+0200)", "2030-04-01 07:00:00 UTC"),
        ("2030-04-02 09:00:00 CEST (+0200)", "2030-04-02 07:00:00 UTC"),
    ]:
        assert f"<tr><td>{local}</td><td>{utc}</td></tr>" in html
    assert "2030-04-03" not in html


def test_next_occurrences_of_a_utc_row_have_one_column(admin_client, admin_user, time_machine):
    row = make("scheduled", channels=["email"], recurrence_rule="0 9 * * *", timezone="UTC")
    time_machine.move_to(datetime(2030, 3, 28, 12, tzinfo=UTC), tick=False)
    admin_client.force_login(admin_user)

    html = admin_client.get(change_url(row)).content.decode()

    assert "<thead><tr><th>UTC</th></tr></thead>" in html
    assert "<tr><td>2030-03-29 09:00:00 UTC</td></tr>" in html


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"channels": []}, "channels", "This field is required."),
        ({"webhook_url": "ftp://example.com/x"}, "webhook_url", "Webhook URLs must use http or https."),
        ({"recurrence_rule": "61 * * * *"}, "recurrence_rule", "Not a valid cron expression"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"payload": "[1, 2]"}, "payload", "The payload must be a JSON object."),
        ({"webhook_secret": "hunter2"}, "webhook_secret", "A webhook secret starts with"),
        ({"email_to": ""}, "email_to", "The email channel needs a recipient."),
        ({"recurrence_rule": "FREQ=DAILY;UNTIL=20200101T000000"}, "recurrence_rule", "no occurrence left"),
    ],
)
def test_change_page_validates_edits_like_schedule(admin_client, changes, field, message):
    row = make("scheduled")
    before = Notification.objects.get(pk=row.pk)

    response = admin_client.post(change_url(row), change_form(row, **changes))

    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert message in " ".join(errors[field])
    after = Notification.objects.get(pk=row.pk)
    assert (after.channels, after.webhook_url, after.recurrence_rule, after.updated_at) == (
        before.channels,
        before.webhook_url,
        before.recurrence_rule,
        before.updated_at,
    )


def test_editing_the_rule_moves_the_due_time_to_the_new_rules_next_occurrence(admin_client, admin_user, time_machine):
    row = make("scheduled", channels=["email"], recurrence_rule="0 9 * * *", timezone="UTC")
    time_machine.move_to(datetime(2030, 1, 7, 12, tzinfo=UTC), tick=False)  # a Monday, noon
    admin_client.force_login(admin_user)

    response = admin_client.post(
        change_url(row), change_form(row, recurrence_rule="30 18 * * *", timezone="Asia/Tokyo")
    )
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    row.refresh_from_db()
    assert row.recurrence_rule == "30 18 * * *"
    assert row.next_fire_at == datetime(2030, 1, 8, 9, 30, tzinfo=UTC)  # 18:30 in Tokyo, the next day


def test_admin_edit_never_writes_back_the_ticks_bookkeeping(admin_client):
    row = make("scheduled")
    page_loaded = Notification.objects.get(pk=row.pk)
    # A tick claims the row after the page was loaded.
    token = uuid.uuid4()
    Notification.objects.filter(pk=row.pk).update(claim_token=token, error_count=1, last_error="webhook: HTTP 503")

    response = admin_client.post(change_url(page_loaded), change_form(page_loaded, subject="New subject"))

    assert response.status_code == 302
    row.refresh_from_db()
    assert row.subject == "New subject"
    assert (row.claim_token, row.error_count, row.last_error) == (token, 1, "webhook: HTTP 503")


def test_secret_is_write_only_keep_rotate_remove(admin_client):
    row = make("scheduled")
    html = admin_client.get(change_url(row)).content.decode()
    assert SECRET not in html and SECRET.removeprefix("whsec_") not in html
    assert "A secret is set and is never shown" in html
    assert 'type="password"' in html

    # A blank field keeps the secret.
    assert admin_client.post(change_url(row), change_form(row, subject="x")).status_code == 302
    row.refresh_from_db()
    assert row.webhook_secret == SECRET

    # A new value rotates it.
    rotated = "whsec_" + "cm90YXRlZC1zZWNyZXQtZm9yLXRoaXMtcm93LW9ubHk="
    assert admin_client.post(change_url(row), change_form(row, webhook_secret=rotated)).status_code == 302
    row.refresh_from_db()
    assert row.webhook_secret == rotated
    assert rotated not in admin_client.get(change_url(row)).content.decode()

    # The box removes it (the site default signs from then on).
    assert admin_client.post(change_url(row), change_form(row, clear_webhook_secret="on")).status_code == 302
    row.refresh_from_db()
    assert row.webhook_secret == ""
    assert "No secret of its own" in admin_client.get(change_url(row)).content.decode()


def test_rejected_secret_is_not_echoed_back(admin_client):
    row = make("scheduled")
    bad = "whsec_dG9vLXNob3J0"  # valid base64, too short
    response = admin_client.post(change_url(row), change_form(row, webhook_secret=bad))
    assert response.status_code == 200
    assert "at least 24 bytes" in response.content.decode()
    assert bad not in response.content.decode()


def test_add_page_schedules_like_the_api(admin_client):
    response = admin_client.post(reverse("admin:notifications_notification_add"), add_form())
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = Notification.objects.get()
    assert row.channels == ["email"]
    assert timezone.now() - row.next_fire_at < timedelta(minutes=1)  # one-shot without a due time: now


def test_secrets_absent_from_every_admin_page(admin_client, webhook_server):
    row = make("due", channels=["webhook"], email_to="", webhook_url=webhook_server.url())
    webhook_server.reply.status = 410
    run_tick()  # a real attempt on record, then a dead letter
    row.refresh_from_db()
    assert row.dead_lettered_at is not None
    admin_client.post(change_url(row), change_form(row, subject="edited"))  # a history entry
    attempt = DeliveryAttempt.objects.get()

    pages = {
        "list": admin_client.get(CHANGELIST),
        "search": admin_client.get(CHANGELIST, {"q": "whsec_"}),
        "change": admin_client.get(change_url(row)),
        "history": admin_client.get(reverse("admin:notifications_notification_history", args=[row.pk])),
        "delete": admin_client.get(reverse("admin:notifications_notification_delete", args=[row.pk])),
        "confirmation": admin_client.post(CHANGELIST, {"action": "purge", "_selected_action": [row.pk]}),
        "attempts": admin_client.get(ATTEMPTS),
        "attempt": admin_client.get(reverse("admin:notifications_deliveryattempt_change", args=[attempt.pk])),
        "ticks": admin_client.get("/admin/notifications/tickrun/"),
    }
    site_secret = settings.NOTIFICATIONS_WEBHOOK_SECRET
    for name, page in pages.items():
        html = page.content.decode()
        assert page.status_code == 200, name
        for secret in (SECRET, SECRET.removeprefix("whsec_"), site_secret, site_secret.removeprefix("whsec_")):
            assert secret not in html, name
    assert "Purge 1 notification?" in pages["confirmation"].content.decode()


# --- delivery history ------------------------------------------------------------------------


def add_attempts(row: Notification, count: int, start: datetime) -> list[DeliveryAttempt]:
    return DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            notification_id=row.pk,
            firing_id=row.firing_id,
            channel="webhook",
            outcome=DeliveryAttempt.AttemptOutcome.FAILED,
            error=f"webhook: HTTP 5{i:02d}",
            error_class="transient",
            http_status=500 + i,
            duration_ms=10 + i,
            attempted_at=start + timedelta(minutes=i),
        )
        for i in range(count)
    )


def test_change_page_shows_recent_attempts_newest_first_and_bounded(admin_client):
    row = make("retrying")
    add_attempts(row, 25, timezone.now() - timedelta(hours=1))
    other = make("dead")
    add_attempts(other, 1, timezone.now())

    response = admin_client.get(change_url(row))

    inline = response.content.decode().split('id="attempts-group"')[1]
    shown = [int(s) for s in re.findall(r">webhook: HTTP 5(\d\d)<", inline)]
    assert shown == list(range(24, 4, -1))  # the latest 20, newest first
    html = response.content.decode()
    assert "all 25 attempts" in html
    assert f"{ATTEMPTS}?notification_id={row.pk}" in html


def test_attempt_history_admin_is_read_only_and_filters(admin_client):
    row = make("retrying")
    add_attempts(row, 3, timezone.now() - timedelta(minutes=10))
    purged = make("dead")
    add_attempts(purged, 2, timezone.now() - timedelta(minutes=5))
    DeliveryAttempt.objects.filter(notification_id=row.pk, http_status=500).update(
        outcome=DeliveryAttempt.AttemptOutcome.OK, error="", error_class="", http_status=200
    )
    Notification.objects.filter(pk=purged.pk).delete()

    html = admin_client.get(ATTEMPTS).content.decode()
    assert re.search(rf'<del title="Gone: purged[^"]*">#{purged.pk}</del>', html)  # history outlives the row
    assert f'href="{change_url(row)}"' in html
    assert "Add delivery attempt" not in html

    only_row = admin_client.get(ATTEMPTS, {"notification_id": row.pk}).content.decode()
    assert only_row.count(">webhook: HTTP 50") == 2 and f"#{purged.pk}" not in only_row
    failed = admin_client.get(ATTEMPTS, {"outcome__exact": "failed"}).content.decode()
    assert failed.count('class="nq-outcome-failed"') == 4
    assert admin_client.get(ATTEMPTS, {"q": "HTTP 501"}).content.decode().count(">webhook: HTTP 501<") == 2

    attempt = DeliveryAttempt.objects.first()
    detail = admin_client.get(reverse("admin:notifications_deliveryattempt_change", args=[attempt.pk]))
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    posted = admin_client.post(reverse("admin:notifications_deliveryattempt_change", args=[attempt.pk]), {})
    assert posted.status_code == 403
    delete = admin_client.post(
        reverse("admin:notifications_deliveryattempt_delete", args=[attempt.pk]), {"post": "yes"}
    )
    assert delete.status_code == 403
    assert DeliveryAttempt.objects.filter(pk=attempt.pk).exists()


def test_both_lists_shorten_a_long_error_alike(admin_client):
    """One line cut by the stylesheet at the column's edge, the whole text (escaped) on hover."""
    long_error = "email: SMTPRecipientsRefused " + "x" * 100 + " <b>"
    row = make("dead")
    Notification.objects.filter(pk=row.pk).update(last_error=long_error)
    attempt = add_attempts(row, 1, timezone.now())[0]
    DeliveryAttempt.objects.filter(pk=attempt.pk).update(error=long_error)
    escaped = "email: SMTPRecipientsRefused " + "x" * 100 + " &lt;b&gt;"

    assert f'<span class="nq-status" title="{escaped}">' in admin_client.get(CHANGELIST).content.decode()
    assert f'<span class="nq-clip" title="{escaped}">{escaped}</span>' in admin_client.get(ATTEMPTS).content.decode()


# --- hand-edited list URLs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "query", "status"),
    [
        (ATTEMPTS, "notification_id=%C2%B2", 200),  # a Unicode digit int() refuses: not a row id, ignored
        (ATTEMPTS, "notification_id=99999999999999999999999999", 200),  # past a BIGINT: ignored
        (ATTEMPTS, "outcome=%00", 302),  # PostgreSQL refuses NUL bytes in text
        (ATTEMPTS, "channel=web%00hook", 302),
        (CHANGELIST, "next_fire_at__year=99999999999", 302),  # past Python's dates
        (CHANGELIST, "q=%00", 302),
        (reverse("admin:notifications_target_changelist"), "state=%00", 302),
    ],
)
def test_a_hand_edited_list_url_is_refused_like_a_bad_lookup_not_a_500(admin_client, url, query, status):
    make("dead")

    response = admin_client.get(f"{url}?{query}")

    assert response.status_code == status
    if status == 302:  # Django's answer to a lookup it cannot run: the "database error" page
        assert response["Location"].endswith("?e=1")
