"""Rules are stateless, senders belong to a tick (issue 41).

Saving a row asks every registered channel's rules; those hold no connection and start no
thread, so saving rows in a fresh process starts none. Only a tick opens senders, and it
closes them; the registry closes what it drops when the setting changes. Each channel
brings its own system checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from django.core import checks
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings

from notifications.channels import Channel, ChannelResult, Firing, registry
from notifications.models import Notification
from notifications.tick.engine import run_tick

ROOT = Path(__file__).resolve().parent.parent
HERE = "tests.test_channel_rules"

# Saves rows in a fresh interpreter (the test's database and settings, a site channel
# added) and prints the threads and sockets that saving them started.
SAVE_ROWS = """
import json, socket, threading
import django

django.setup()
from django.db import connection

connection.ensure_connection()  # the database's own socket is no channel's
from notifications.api import schedule
from notifications.models import Notification

sockets = []
real_init = socket.socket.__init__


def counting_init(self, *args, **kwargs):
    sockets.append(repr(args[:2]))
    real_init(self, *args, **kwargs)


socket.socket.__init__ = counting_init
before = {thread.ident for thread in threading.enumerate()}
schedule(channels=["webhook"], webhook_url="https://hooks.example.com/a", payload={"n": 1})
schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="Hello")
schedule(channels=["sms"], channel_data={"sms": {"to": "+15551234567"}}, body="4711")
schedule(channels=["ops"], channel_data={"ops": {}}, subject="Disk", body="full")
for channels, fields in (
    (["webhook"], {"webhook_url": "https://hooks.example.com/b"}),
    (["email"], {"email_to": "bob@example.com", "subject": "Hi", "body": "Hello"}),
    (["sms"], {"channel_data": {"sms": {"to": "+15557654321"}}, "body": "4712"}),
):
    row = Notification(channels=channels, **fields)
    row.full_clean()
    row.save()
started = [t.name for t in threading.enumerate() if t.ident not in before]
print(json.dumps({"threads": started, "sockets": sockets, "rows": Notification.objects.count()}))
"""


def run_fresh(script: str, **settings: Any) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter on this test's database (`tests.child_settings`)."""
    db = {
        k: v for k, v in connection.settings_dict.items() if k in ("ENGINE", "NAME", "HOST", "PORT", "USER", "OPTIONS")
    }
    if connection.settings_dict.get("PASSWORD"):
        db["PASSWORD"] = connection.settings_dict["PASSWORD"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.child_settings",
        "NOTIFICATIONS_TEST_DATABASE": json.dumps(db),
        "NOTIFICATIONS_TEST_SETTINGS": json.dumps(settings),
    }
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db(transaction=True)
def test_saving_rows_in_a_fresh_process_starts_no_thread_and_opens_no_socket():
    site_channels = {
        "sms": {"BACKEND": "tests.support.site_channels.SMSChannel", "OPTIONS": {}},
        "ops": {"BACKEND": "notifications.channels.apprise.AppriseChannel", "OPTIONS": {"urls": "json://127.0.0.1:9/"}},
    }
    done = run_fresh(SAVE_ROWS, NOTIFICATIONS_CHANNELS=site_channels)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["rows"] == 7
    assert found["threads"] == []  # no notifications-watchdog, no pool
    assert found["sockets"] == []


@pytest.mark.django_db(transaction=True)
def test_a_fresh_process_refuses_a_bad_row_through_the_channels_rules():
    """The channels' rules reach the models through the hook `AppConfig.ready()` fills: a
    fresh process (nothing of the registry imported beforehand) still refuses a bad row."""
    script = """
import django

django.setup()
from django.core.exceptions import ValidationError
from notifications.models import Notification

for row in (
    Notification(channels=["webhook"], webhook_url="ftp://hooks.example.com/"),
    Notification(channels=["sms"]),
    Notification(channels=["email"], email_to="not an address", subject="Hi"),
):
    try:
        row.save()
    except ValidationError as exc:
        print(sorted(exc.message_dict))
    else:
        print("saved")
"""
    sms = {"sms": {"BACKEND": "tests.support.site_channels.SMSChannel", "OPTIONS": {}}}
    done = run_fresh(script, NOTIFICATIONS_CHANNELS=sms)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['webhook_url']", "['channel_data']", "['email_to']"]
    assert not Notification.objects.exists()


class CountingChannel(Channel):
    """A site channel that holds a session from its construction, as the docs' Slack example does."""

    built: ClassVar[list[CountingChannel]] = []

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.closed = False
        CountingChannel.built.append(self)

    def deliver(self, firing: Firing) -> ChannelResult:
        return ChannelResult(self.name)

    def close(self) -> None:
        self.closed = True


class BadCloseChannel(CountingChannel):
    def close(self) -> None:
        raise RuntimeError("already closed")


class CheckedChannel(CountingChannel):
    """Brings a system check of its own: its OPTIONS need a `token`."""

    @classmethod
    def check(cls, name: str, options: dict[str, Any]) -> list[checks.CheckMessage]:
        if options.get("token"):
            return []
        return [checks.Error(f"{name}: OPTIONS needs a token.", hint="Set OPTIONS['token'].", id="ops.E001")]


def only(**classes: str) -> override_settings:
    return override_settings(
        NOTIFICATIONS_CHANNELS={name: {"BACKEND": f"{HERE}.{cls}", "OPTIONS": {}} for name, cls in classes.items()}
    )


@pytest.fixture(autouse=True)
def _forget_built():
    CountingChannel.built.clear()
    yield
    CountingChannel.built.clear()


def test_the_registry_closes_the_rules_it_drops_when_the_setting_changes():
    with only(ops="CountingChannel"):
        rules = registry.channel("ops")
        assert isinstance(rules, CountingChannel) and not rules.closed
    assert rules.closed  # override_settings ended: setting_changed reset the registry


def test_reset_closes_what_it_drops_and_a_failing_close_loses_nothing(caplog):
    with only(ops="CountingChannel", bad="BadCloseChannel"):
        ops, bad = registry.channel("ops"), registry.channel("bad")
        registry.reset()
        assert isinstance(ops, CountingChannel) and ops.closed
        assert isinstance(bad, BadCloseChannel)  # its close raised: logged, the others still closed
        assert "'bad']: the channel cannot be closed" in caplog.text
        assert registry.channel("ops") is not ops  # built again from the settings


def test_the_registry_keeps_rules_the_tick_never_sends_with():
    """The webhook's rules hold no transport: only `open_for_tick` builds one."""
    rules = registry.channel("webhook")
    assert rules is not None and not isinstance(rules, Channel)
    assert rules.target(Notification(webhook_url="https://Hooks.Example.com:8443/x")) == "hooks.example.com:8443"
    from notifications.conf import TickSettings

    opened = registry.open_for_tick(TickSettings.read())
    try:
        assert isinstance(opened["webhook"], Channel)
    finally:
        for sender in opened.values():
            sender.close()


@only(ops="CheckedChannel")
def test_a_channel_brings_its_own_system_checks():
    assert [(m.id, m.msg) for m in run_checks()] == [("ops.E001", "ops: OPTIONS needs a token.")]
    with override_settings(
        NOTIFICATIONS_CHANNELS={"ops": {"BACKEND": f"{HERE}.CheckedChannel", "OPTIONS": {"token": "t"}}}
    ):
        assert run_checks() == []


@override_settings(
    NOTIFICATIONS_WEBHOOK_SECRET=42,
    NOTIFICATIONS_CHANNELS={"hooks": {"BACKEND": "notifications.channels.webhook.channel.WebhookChannel"}},
)
def test_a_channel_that_reuses_a_built_in_class_reports_the_site_wide_settings_once():
    """The webhook's checks read site-wide settings: a second name for its class adds no copy."""
    assert [m.id for m in run_checks()] == ["notifications.E009"]


def watchdogs() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "notifications-watchdog")


@pytest.mark.django_db(transaction=True)
def test_only_the_tick_opens_senders_and_it_closes_them(make_row, webhook_server):
    before = watchdogs()
    make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"n": 1})
    assert watchdogs() == before  # saving opened nothing
    assert run_tick().counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1  # the send went through the tick's watchdog
    assert watchdogs() == before  # and the tick closed it
