"""`notifications_status` shows only the rate limits in force now: a bucket left by a limit
since removed (or changed) holds nothing back. After a tick under
NOTIFICATIONS_RATE_LIMITS={"127.0.0.1:8150": "1/d"} and the setting's removal it still said
"at limit: 127.0.0.1:8150 (1/d), next slot in 86305s"."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from notifications.flow.ratelimit import Limit, take
from notifications.models import TickRun

pytestmark = pytest.mark.django_db
TARGET = "127.0.0.1:8150"


@pytest.fixture(autouse=True)
def ticking():
    """A tick finished a moment ago: the status command exits 0."""
    now = timezone.now()
    TickRun.objects.create(
        started_at=now - timedelta(seconds=3), finished_at=now - timedelta(seconds=1), host="cron-1", pid=1
    )


def status(*args: str) -> str:
    out = StringIO()
    call_command("notifications_status", *args, stdout=out)
    return out.getvalue()


def test_a_limit_in_force_is_shown(settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {TARGET: "1/d"}
    take(TARGET, (Limit(1, "d"),), 1)

    assert f"at limit: {TARGET} (1/d), next slot in " in status()
    (limited,) = json.loads(status("--json"))["at_limit"]
    assert (limited["target"], limited["limit"]) == (TARGET, "1/d")


def test_a_removed_limit_is_not_shown(settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {TARGET: "1/d"}
    take(TARGET, (Limit(1, "d"),), 1)
    del settings.NOTIFICATIONS_RATE_LIMITS

    assert "at limit" not in status()
    facts = json.loads(status("--json"))
    assert (facts["at_limit"], facts["at_limit_total"]) == ([], 0)


def test_a_changed_limit_shows_only_the_one_in_force(settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {TARGET: "1/d"}
    take(TARGET, (Limit(1, "d"),), 1)
    settings.NOTIFICATIONS_RATE_LIMITS = {TARGET: "100/d"}

    assert "at limit" not in status()


def test_a_wildcard_limit_covers_each_webhook_host_but_not_email(settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {"*": "1/d"}
    take(TARGET, (Limit(1, "d"),), 1)
    take("email", (Limit(1, "d"),), 1)  # left from an email limit since removed

    out = status()
    assert f"at limit: {TARGET} (1/d)" in out
    assert "email" not in out
