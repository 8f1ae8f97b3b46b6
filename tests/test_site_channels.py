"""Channels of the site's own (NOTIFICATIONS_CHANNELS): the contract, end to end, with real
channel classes (tests/support/site_channels.py) on the real database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import checks, mail
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from notifications.api import requeue, schedule
from notifications.channels import Channel, ChannelResult, ErrorClass, Firing
from notifications.models import DeliveryAttempt, Notification, Target
from notifications.tick.engine import run_tick
from tests.support import mail_doubles, site_channels

pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT = "tests.support.site_channels"
TO = {"sms": {"to": "+15551234567"}}
EMAIL = {"email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}


def channels(**classes: str) -> override_settings:
    return override_settings(
        NOTIFICATIONS_CHANNELS={name: {"BACKEND": f"{SUPPORT}.{cls}", "OPTIONS": {}} for name, cls in classes.items()}
    )


@pytest.fixture(autouse=True)
def _clean_support():
    site_channels.SENT.clear()
    site_channels.RELEASE.clear()
    site_channels.STARTED.clear()
    yield
    site_channels.RELEASE.set()  # a hanging send still waiting returns


def test_the_contract_is_importable_from_channels():
    assert issubclass(site_channels.SMSChannel, Channel)
    assert ChannelResult("sms").ok
    failed = ChannelResult("sms", error="sms: nope", error_class=ErrorClass.PERMANENT)
    assert not failed.ok and failed.error_class == ErrorClass.PERMANENT
    assert Firing.__dataclass_fields__.keys() >= {"notification", "firing_id"}


@channels(sms="SMSChannel")
def test_a_site_channel_delivers_and_the_row_is_done():
    row = schedule(channels=["sms"], channel_data=TO)
    report = run_tick()
    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert [("sms", "+15551234567", str(row.firing_id))] == site_channels.SENT
    attempt = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert (attempt.channel, attempt.target, attempt.outcome) == ("sms", "sms", "ok")


@override_settings(
    NOTIFICATIONS_CHANNELS={"sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "OPTIONS": {"sender": "Billing"}}}
)
def test_options_are_keyword_arguments_kept_as_options_and_the_name_is_known():
    from notifications.channels import registry

    sms = registry.channel("sms")
    assert isinstance(sms, site_channels.SMSChannel)
    assert (sms.name, sms.options) == ("sms", {"sender": "Billing"})


@channels(sms="TransientChannel")
def test_a_transient_failure_is_retried_after_the_backoff():
    row = schedule(channels=["sms"], channel_data=TO)
    now = timezone.now()
    run_tick(now=now)
    row.refresh_from_db()
    assert row.error_count == 1
    assert row.last_error == "sms: 503 provider busy"
    assert row.next_fire_at == now + timedelta(seconds=60)
    assert row.dead_lettered_at is None


@channels(sms="PermanentChannel")
def test_a_permanent_failure_is_a_dead_letter_at_once():
    row = schedule(channels=["sms"], channel_data=TO)
    report = run_tick()
    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.dead_lettered_at is not None and row.next_fire_at is None
    assert row.last_error == "sms: number unreachable"
    attempt = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert attempt.error_class == "permanent"


@channels(sms="RaisingChannel")
def test_an_exception_from_deliver_is_a_transient_internal_failure():
    row = schedule(channels=["sms"], channel_data=TO)
    report = run_tick()
    row.refresh_from_db()
    assert report.counts()["retried"] == 1
    assert row.last_error == "sms: internal: RuntimeError"
    assert "s3cret" not in row.last_error


@override_settings(NOTIFICATIONS_CHANNEL_TIMEOUT=0.5)
# A send blocked in its worker thread, and one an asynchronous channel began and never answered.
@pytest.mark.parametrize("hanging", ["HangingChannel", "NeverAnsweringChannel"])
def test_a_channel_hanging_past_the_deadline_is_a_timeout_and_the_tick_goes_on(hanging):
    with channels(sms=hanging):
        hung = schedule(channels=["sms"], channel_data=TO)
        other = schedule(channels=["email"], **EMAIL)
        report = run_tick()
    assert site_channels.STARTED.is_set()
    hung.refresh_from_db()
    assert hung.last_error == "sms: timed out after 0.5s"
    assert hung.error_count == 1
    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=other.pk).exists()
    assert len(mail.outbox) == 1


@channels(sms="TransientChannel")
def test_partial_with_email_then_requeue_sends_only_the_failed_channel():
    row = schedule(channels=["email", "sms"], channel_data=TO, **EMAIL)
    report = run_tick()
    row.refresh_from_db()
    assert report.counts()["partial"] == 1
    assert row.last_error == "partial: sms"
    assert len(mail.outbox) == 1 and len(site_channels.SENT) == 1
    requeue([row])
    run_tick()
    assert len(mail.outbox) == 1  # email went out once
    assert len(site_channels.SENT) == 2  # the failed one again
    row.refresh_from_db()
    assert row.last_error == "sms: 503 provider busy"  # this firing owes only sms now: a full failure of it
    assert row.error_count == 1


@channels(sms="SMSChannel")
def test_channel_data_is_validated_by_the_channel():
    with pytest.raises(ValidationError) as missing:
        schedule(channels=["sms"])
    assert "channel_data" in missing.value.error_dict
    with pytest.raises(ValidationError) as refused:
        schedule(channels=["sms"], channel_data={"sms": {"to": "5551234"}})
    assert "channel_data" in refused.value.error_dict
    assert "E.164" in str(refused.value.error_dict["channel_data"])
    with pytest.raises(ValidationError) as unknown:
        schedule(channels=["push"], channel_data={"push": {}})
    assert "channels" in unknown.value.error_dict
    with pytest.raises(ValidationError) as builtin_named:
        schedule(channels=["sms"], channel_data=["not", "an", "object"])
    assert "channel_data" in builtin_named.value.error_dict


@channels(sms="SMSChannel")
def test_a_row_written_around_validation_is_dead_lettered_saying_why():
    row = schedule(channels=["sms"], channel_data=TO)
    Notification.objects.filter(pk=row.pk).update(channel_data={"sms": {"to": "nope"}})
    run_tick()
    row.refresh_from_db()
    assert row.dead_lettered_at is not None
    assert row.last_error.startswith("invalid: channel_data: sms:")
    assert site_channels.SENT == []


def test_a_channel_removed_from_the_settings_is_unknown():
    with channels(sms="SMSChannel"):
        row = schedule(channels=["sms"], channel_data=TO)
    run_tick()
    row.refresh_from_db()
    assert row.last_error.startswith("invalid: channels: Unknown channel(s): 'sms'")


@override_settings(NOTIFICATIONS_RATE_LIMITS={"sms": "1/m", "*": "100/s"})
@channels(sms="SMSChannel")
def test_rate_limits_apply_to_a_site_channel_by_its_name():
    for _ in range(3):
        schedule(channels=["sms"], channel_data=TO)
    report = run_tick()
    assert report.counts()["succeeded"] == 1
    assert report.counts()["deferred"] == 2


@override_settings(NOTIFICATIONS_RATE_LIMITS={"*": "1/m"})
@channels(sms="SMSChannel")
def test_the_wildcard_limit_is_for_webhook_hosts_not_a_site_channel():
    for _ in range(3):
        schedule(channels=["sms"], channel_data=TO)
    assert run_tick().counts()["succeeded"] == 3


@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 2, "cooldown": 60, "max_cooldown": 3600})
@channels(sms="TransientChannel")
def test_the_circuit_breaker_opens_on_a_failing_site_channel():
    for _ in range(4):
        schedule(channels=["sms"], channel_data=TO)
    run_tick()
    target = Target.objects.get(key="sms")
    assert target.state == "open"
    assert len(site_channels.SENT) < 4  # the rest are held, not sent into the failure


@channels(sms="TransientChannel")
def test_the_admin_filters_by_a_site_channel(admin_client):
    schedule(channels=["sms"], channel_data=TO)
    schedule(channels=["email"], **EMAIL)
    page = admin_client.get("/admin/notifications/notification/", {"channel": "sms"})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert b"+15551234567" in page.content


@channels(sms="TransientChannel")
def test_the_test_double_records_a_site_channels_sends():
    from notifications.testing import capture_notifications

    with capture_notifications() as captured:
        row = schedule(channels=["sms"], channel_data=TO)
        report = captured.tick()
        assert report.counts()["succeeded"] == 1  # the double answers, the real class is not called
        assert [send.data for send in captured.sent("sms")] == [{"to": "+15551234567"}]
        assert captured.sends[0].firing.firing_id == str(row.firing_id)
        captured.fail("sms", "sms: no credit", permanent=True)
        schedule(channels=["sms"], channel_data=TO)
        assert captured.tick().counts()["dead_lettered"] == 1
    assert site_channels.SENT == []


# --- routing "first" -----------------------------------------------------------------------


@channels(sms="TransientChannel")
def test_first_falls_back_to_the_next_channel_and_is_a_full_success():
    row = schedule(channels=["sms", "email"], routing="first", channel_data=TO, **EMAIL)
    report = run_tick()
    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert len(mail.outbox) == 1
    tried = list(
        DeliveryAttempt.objects.filter(notification_id=row.pk).order_by("id").values_list("channel", "outcome")
    )
    assert sorted(tried) == [("email", "ok"), ("sms", "failed")]


@channels(sms="SMSChannel")
def test_first_stops_at_the_first_success():
    row = schedule(channels=["sms", "email"], routing="first", channel_data=TO, **EMAIL)
    run_tick()
    assert len(site_channels.SENT) == 1
    assert mail.outbox == []
    assert list(DeliveryAttempt.objects.filter(notification_id=row.pk).values_list("channel", flat=True)) == ["sms"]


@override_settings(EMAIL_BACKEND=mail_doubles.BACKEND)
@channels(sms="TransientChannel")
def test_first_with_none_succeeding_is_a_full_failure_retried_from_the_first():
    fields = {**EMAIL, "email_to": mail_doubles.DOWN_TO}
    row = schedule(channels=["sms", "email"], routing="first", channel_data=TO, **fields)
    now = timezone.now()
    run_tick(now=now)
    row.refresh_from_db()
    assert row.error_count == 1
    assert row.last_error.startswith("sms: 503 provider busy; email:")
    assert row.pending_channels is None  # the next attempt starts again with sms
    run_tick(now=now + timedelta(seconds=61))
    assert [name for name, _, _ in site_channels.SENT] == ["sms", "sms"]


def test_routing_is_validated():
    with pytest.raises(ValidationError) as info:
        schedule(channels=["email"], routing="any", **EMAIL)
    assert "routing" in info.value.error_dict


# --- system checks -------------------------------------------------------------------------


def run_checks() -> list[checks.CheckMessage]:
    from notifications.checks.site_channels import check_channels

    return check_channels()


@pytest.mark.parametrize(
    ("setting", "check_id"),
    [
        ({"sms": {"BACKEND": "tests.support.site_channels.Missing"}}, "notifications.W030"),
        ({"sms": {"BACKEND": "no_such_module.SMS"}}, "notifications.W030"),
        ({"sms": {"BACKEND": f"{SUPPORT}.NotAChannel"}}, "notifications.W031"),
        ({"email": {"BACKEND": f"{SUPPORT}.SMSChannel"}}, "notifications.E032"),
        ({"webhook": {"BACKEND": f"{SUPPORT}.SMSChannel"}}, "notifications.E032"),
        ({"sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "OPTIONS": ["sender"]}}, "notifications.E033"),
        ({"sms": f"{SUPPORT}.SMSChannel"}, "notifications.E033"),
        ({"SMS Gateway": {"BACKEND": f"{SUPPORT}.SMSChannel"}}, "notifications.E033"),
        ([("sms", {})], "notifications.E033"),
        ({"sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "TIMEOUT": 0}}, "notifications.E033"),
        ({"sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "TIMEOUT": "30"}}, "notifications.E033"),
        ({"sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "TIMEOUT": 3601}}, "notifications.E033"),
    ],
)
def test_checks_report_a_bad_channel_setting(setting, check_id):
    with override_settings(NOTIFICATIONS_CHANNELS=setting):
        assert [m.id for m in run_checks()] == [check_id]


@channels(sms="SMSChannel", push="SMSChannel")
def test_checks_pass_a_good_channel_setting():
    assert run_checks() == []


@override_settings(
    NOTIFICATIONS_CHANNEL_TIMEOUT=4,
    NOTIFICATIONS_CHANNELS={
        "sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "TIMEOUT": 30},
        "push": {"BACKEND": f"{SUPPORT}.SMSChannel"},
    },
)
def test_a_channel_entry_gives_its_sends_a_deadline_of_their_own():
    from notifications.channels import registry
    from notifications.conf import TickSettings

    assert run_checks() == []
    opened = registry.open_for_tick(TickSettings.read())
    assert (opened["sms"].timeout, opened["push"].timeout, opened["email"].timeout) == (30, 4, 4)
    for channel in opened.values():
        channel.close()


@override_settings(NOTIFICATIONS_CHANNELS={"email": {"BACKEND": f"{SUPPORT}.SMSChannel"}})
def test_a_built_in_name_is_never_taken_over():
    from notifications.channels import registry

    assert type(registry.channel("email")).__name__ == "EmailChannel"


@channels(sms="TransientChannel")
def test_the_admin_shows_which_channel_delivered_a_first_routed_row(admin_client):
    row = schedule(channels=["sms", "email"], routing="first", channel_data=TO, recurrence_rule="0 9 * * *", **EMAIL)
    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now())
    run_tick()
    page = admin_client.get(f"/admin/notifications/notification/{row.pk}/change/")
    assert page.status_code == 200
    assert b"sms failed, email delivered" in page.content


@channels(sms="SMSChannel")
def test_signals_and_metrics_name_a_site_channel():
    from notifications.health import monitoring
    from notifications.signals import notification_delivered

    seen = []

    def on_delivered(sender, notification, **kwargs):
        seen.append(notification.channels)

    notification_delivered.connect(on_delivered)
    try:
        schedule(channels=["sms"], channel_data=TO)
        run_tick()
    finally:
        notification_delivered.disconnect(on_delivered)
    assert seen == [["sms"]]
    assert monitoring.read().by_channel()[("sms", "delivered")] == 1


@channels(sms="SMSChannel")
def test_schedule_many_validates_channel_data_by_index():
    from notifications.api import schedule_many

    with pytest.raises(ValidationError) as info:
        schedule_many([{"channels": ["sms"], "channel_data": TO}, {"channels": ["sms"]}])
    assert "1.channel_data" in info.value.message_dict
    rows = schedule_many([{"channels": ["sms"], "channel_data": TO, "routing": "first"}])
    assert rows[0].channel_data == TO and rows[0].routing == "first"
    run_tick()
    assert len(site_channels.SENT) == 1


@override_settings(NOTIFICATIONS_CHANNEL_TIMEOUT=0.5)
@channels(sms="HangingChannel")
def test_first_abandons_a_channel_that_ignores_its_deadline_and_calls_the_next():
    """Issue 45, finding 5: the hung first channel is timed out at its deadline, the second
    delivers, and the row is a full success (not three timeouts and a dead letter)."""
    row = schedule(channels=["sms", "email"], routing="first", channel_data=TO, **EMAIL)
    report = run_tick()
    assert site_channels.STARTED.is_set()
    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert len(mail.outbox) == 1
    tried = dict(DeliveryAttempt.objects.filter(notification_id=row.pk).values_list("channel", "error"))
    assert tried == {"sms": "sms: timed out after 0.5s", "email": ""}
