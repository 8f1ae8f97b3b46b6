"""Configuration that would fail late: a site with webhooks and no signing key.

`manage.py check` reports it (the warning notifications.W010, an empty NOTIFICATIONS_WEBHOOK_SECRET:
it stops no command, `migrate`, `test` and `runserver` have nothing to sign);
at send time the rows that need the site's key are held, not failed: no retry spent, no
attempt logged, nothing sent, and the admin header and `notifications_status` say why.
The first tick after the key is set sends them.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core import checks, mail
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.models import DeliveryAttempt, Notification, TickRun
from notifications.outcomes import CONFIGURATION_HOLD
from tests.support.queue_states import SECRET

pytestmark = pytest.mark.django_db

NO_KEY = "webhook: no signing secret configured (NOTIFICATIONS_WEBHOOK_SECRET is empty)"
CHANGELIST = "/admin/notifications/notification/"


def secret_messages() -> list[tuple[str, str]]:
    """(id, message) of the secret's checks: E009, E010, W010."""
    wanted = ("notifications.E009", "notifications.E010", "notifications.W010")
    return [(m.id, m.msg) for m in checks.run_checks() if m.id in wanted]


# --- manage.py check -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "empty",
    ["", [], [""], ("", ""), None],
    ids=["blank", "no keys", "a blank key", "blank keys", "None (os.environ.get of a missing variable)"],
)
def test_a_site_secret_set_but_empty_is_a_warning(empty):
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=empty):
        found = [m for m in checks.run_checks() if m.id in ("notifications.E009", "notifications.W010")]
    (error,) = found
    assert error.id == "notifications.W010"
    assert error.level == checks.WARNING
    assert error.msg == (
        "NOTIFICATIONS_WEBHOOK_SECRET holds no key (its environment variable unset or blank?): webhooks without a "
        "webhook_secret of their own cannot be signed, and are held (no retry spent) until a key is set."
    )
    assert error.hint.startswith("Set a key, or remove the setting if every webhook row carries its own. Generate one")


def test_no_site_secret_setting_at_all_is_not_an_error(settings):
    del settings.NOTIFICATIONS_WEBHOOK_SECRET  # a site that signs every row with its own key, or sends no webhooks
    assert secret_messages() == []


def test_a_rotation_list_passes(settings):
    settings.NOTIFICATIONS_WEBHOOK_SECRET = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", SECRET]
    assert secret_messages() == []


def test_check_warns_and_passes(settings, capsys):
    settings.NOTIFICATIONS_WEBHOOK_SECRET = ""
    call_command("check")
    assert "notifications.W010" in capsys.readouterr().err
    with pytest.raises(SystemCheckError, match=r"notifications\.W010"):
        call_command("check", "--fail-level", "WARNING")  # CI's strict check still notices


def test_runtick_sends_the_rest_and_says_what_it_held(settings, webhook_server, capsys):
    settings.NOTIFICATIONS_WEBHOOK_SECRET = ""
    schedule(channels=["webhook"], webhook_url=webhook_server.url("/a"))
    schedule(channels=["webhook"], webhook_url=webhook_server.url("/b"))
    schedule(channels=["email"], email_to="b@example.com")

    call_command("runtick")

    summary, held = capsys.readouterr().out.splitlines()
    assert "claimed=3 succeeded=1 " in summary and " deferred=2 " in summary
    assert held.endswith(f" 2 held: {NO_KEY} (this process's settings; manage.py check says how to fix it)")
    assert [m.to for m in mail.outbox] == [["b@example.com"]]
    assert TickRun.objects.latest().held == f"2 held: {NO_KEY}"


# --- at send time: held, not failed --------------------------------------------------------------


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET="")
def test_rows_that_need_the_site_key_are_held_without_spending_a_retry(webhook_server):
    unsigned = schedule(channels=["webhook"], webhook_url=webhook_server.url("/unsigned"))
    retrying = schedule(channels=["webhook"], webhook_url=webhook_server.url("/retrying"))
    Notification.objects.filter(pk=retrying.pk).update(error_count=2, last_error="webhook: HTTP 503")
    both = schedule(channels=["email", "webhook"], email_to="a@example.com", webhook_url=webhook_server.url("/both"))
    own_key = schedule(channels=["webhook"], webhook_url=webhook_server.url("/own"), webhook_secret=SECRET)
    email_only = schedule(channels=["email"], email_to="b@example.com")
    now = timezone.now()

    report = run_tick(now=now)

    assert report.counts()["deferred"] == 3 and report.counts()["succeeded"] == 2
    assert [r.path for r in webhook_server.received] == ["/own"]  # nothing unsigned goes out
    assert [m.to for m in mail.outbox] == [["b@example.com"]]  # a held row sends none of its channels
    for row, count, error in ((unsigned, 0, None), (retrying, 2, "webhook: HTTP 503"), (both, 0, None)):
        row.refresh_from_db()
        assert row.error_count == count  # no retry spent
        assert row.last_error == error  # and no failure recorded: nothing was attempted
        assert row.next_fire_at == now + CONFIGURATION_HOLD
        assert row.claimed_until is None
    assert not DeliveryAttempt.objects.filter(notification_id__in=[unsigned.pk, retrying.pk, both.pk]).exists()
    assert not Notification.objects.filter(pk__in=[own_key.pk, email_only.pk]).exists()


def test_the_first_tick_after_the_key_is_set_sends_them(webhook_server):
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=""):
        row = schedule(channels=["webhook"], webhook_url=webhook_server.url())
        run_tick()
    assert Notification.objects.filter(pk=row.pk).exists()

    run_tick(now=timezone.now() + CONFIGURATION_HOLD)  # the test settings hold a key

    (received,) = webhook_server.received
    assert received.headers["webhook-signature"].startswith("v1,")
    assert not Notification.objects.filter(pk=row.pk).exists()


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET=None)
def test_a_none_site_key_holds_them_as_a_blank_one_does(webhook_server):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url())
    outcomes = []
    run_tick(on_outcome=outcomes.append)
    (outcome,) = outcomes
    assert outcome.detail == f"held: {NO_KEY}"
    assert Notification.objects.get(pk=row.pk).error_count == 0
    assert webhook_server.received == []


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET=["whsec_not*base64"])
def test_a_malformed_site_key_holds_them_too(webhook_server):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url())
    outcomes = []
    run_tick(on_outcome=outcomes.append)
    (outcome,) = outcomes
    assert outcome.detail == "held: webhook: NOTIFICATIONS_WEBHOOK_SECRET is malformed"
    assert Notification.objects.get(pk=row.pk).error_count == 0
    assert webhook_server.received == []


# --- said in the admin header and by notifications_status ---------------------------------------


def held_rows() -> list[Notification]:
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"):
        rows = [schedule(channels=["webhook"], webhook_url=f"https://hooks.example.com/{n}") for n in range(2)]
        schedule(channels=["webhook"], webhook_url="https://hooks.example.com/own", webhook_secret=SECRET)
        schedule(channels=["email"], email_to="c@example.com")
    return rows


WARNING = (
    "Webhooks are held: no signing secret configured (NOTIFICATIONS_WEBHOOK_SECRET is empty). 2 rows wait for "
    "a key to sign with (no retry is spent): set NOTIFICATIONS_WEBHOOK_SECRET to a key (manage.py check says how) "
    "and the next tick sends them."
)


def test_the_admin_says_why_rows_are_held(admin_client):
    rows = held_rows()
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=""):
        listing = admin_client.get(CHANGELIST).content.decode()
        page = admin_client.get(f"{CHANGELIST}{rows[0].pk}/change/").content.decode()
    assert f'<p class="nq-health-warning nq-config-warning" role="alert"><strong>Warning:</strong> {WARNING}</p>' in (
        listing
    )
    assert listing.count(f'<span class="nq-status" title="held: {NO_KEY}">') == 2
    assert f"Held: {NO_KEY}. Nothing is sent and no retry is spent" in page

    assert "nq-config-warning" not in admin_client.get(CHANGELIST).content.decode()  # a key: nothing held


def test_notifications_status_says_so_and_fails(capsys):
    held_rows()
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=""):
        with pytest.raises(CommandError, match="Webhooks are held"):
            call_command("notifications_status", "--stale-after", "1000d")
        lines = capsys.readouterr().out.splitlines()
        assert f"held by this process's settings: {WARNING}" in lines
        assert lines[-1] in ("status: HELD (this process's settings)", "status: STALE, HELD (this process's settings)")

        with pytest.raises(CommandError):
            call_command("notifications_status", "--json")
        facts = json.loads(capsys.readouterr().out)
        assert (facts["unsigned"], facts["signing_problem"], facts["configuration_warning"]) == (2, NO_KEY, WARNING)


def test_paused_and_dead_rows_are_not_counted_as_waiting(capsys):
    rows = held_rows()
    Notification.objects.filter(pk=rows[0].pk).update(paused_at=timezone.now())
    Notification.objects.filter(pk=rows[1].pk).update(next_fire_at=None, dead_lettered_at=timezone.now())
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=""):
        from notifications.health.queue import queue_health

        health = queue_health(now=timezone.now() + timedelta(seconds=1))
    assert health.unsigned == 0 and health.configuration_warning is None


def test_notifications_status_tells_its_own_view_from_the_last_ticks(capsys, settings):
    """Cron's tick has the key (its environment file) and delivers; `notifications_status` in
    a shell without it says the hold is its own view, and what the last tick reported."""
    held_rows()
    call_command("runtick")  # with the test settings' key: nothing held
    capsys.readouterr()
    settings.NOTIFICATIONS_WEBHOOK_SECRET = ""
    schedule(
        channels=["webhook"], webhook_url="https://hooks.example.com/later", fire_at=timezone.now() + timedelta(hours=1)
    )

    with pytest.raises(CommandError):
        call_command("notifications_status")

    lines = capsys.readouterr().out.splitlines()
    tick = TickRun.objects.latest()
    assert f"held by the last tick (pid {tick.pid} on {tick.host}): nothing" in lines
    assert any(line.startswith("held by this process's settings: Webhooks are held") for line in lines)
    assert lines[-1] == "status: HELD (this process's settings)"


def test_notifications_status_reports_the_last_ticks_hold_whatever_its_own_settings(capsys, settings):
    settings.NOTIFICATIONS_WEBHOOK_SECRET = ""
    schedule(channels=["webhook"], webhook_url="https://hooks.example.com/x")
    call_command("runtick")
    capsys.readouterr()
    settings.NOTIFICATIONS_WEBHOOK_SECRET = SECRET  # this shell has a key; the tick's process had none

    with pytest.raises(CommandError, match=r"The last tick .* held rows for a setting: 1 held: webhook: no signing"):
        call_command("notifications_status", "--stale-after", "1000d")

    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("held by this process's settings") for line in lines)
    assert lines[-1] == "status: HELD (the last tick)"
    call_command_json = json.loads(_status_json(capsys))
    assert call_command_json["last_tick"]["held"] == f"1 held: {NO_KEY}"


def _status_json(capsys) -> str:
    with pytest.raises(CommandError):
        call_command("notifications_status", "--json", "--stale-after", "1000d")
    return capsys.readouterr().out
