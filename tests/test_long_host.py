"""A webhook host of 373 characters (every label at most 63), reached by bulk_create.

Django's URLValidator refuses it on save; the tick's own URL check must too, and
dead-letter the row saying why, before flow control stores its target: on PostgreSQL it
fit neither `Target.key` (300) nor `RateBucket.key` (320), and every tick crashed with the
healthy rows behind it never sent.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.models import Notification, RateBucket, Target

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
HOST = ".".join(["a" * 63] * 5 + ["b" * 45, "example"])  # 373 characters


@override_settings(
    NOTIFICATIONS_RATE_LIMITS={"*": "1000/s"},
    NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 1, "cooldown": 60},
)
def test_a_host_too_long_is_dead_lettered_and_the_rows_behind_it_go_out(webhook_server):
    assert len(HOST) == 373
    fields = {"channels": ["webhook"], "payload": {}, "timezone": "UTC"}
    Notification.objects.bulk_create(
        [Notification(webhook_url=f"https://{HOST}/hook", next_fire_at=NOW.replace(year=NOW.year - 1), **fields)]
    )
    healthy = [schedule(webhook_url=webhook_server.url(f"/in/{n}"), fire_at=NOW, **fields) for n in range(30)]

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 30
    assert len(webhook_server.received) == 30
    assert not Notification.objects.filter(pk__in=[r.pk for r in healthy]).exists()
    (dead,) = Notification.objects.all()
    assert dead.dead_lettered_at is not None and dead.next_fire_at is None
    assert dead.last_error == "invalid: webhook_url: The webhook URL's host is longer than 253 characters."
    assert not Target.objects.exists()
    assert not RateBucket.objects.filter(key__startswith="a").exists()
    assert run_tick(now=NOW).claimed == 0


def test_schedule_refuses_the_host_on_webhook_url():
    with pytest.raises(ValidationError) as refused:
        schedule(channels=["webhook"], webhook_url=f"https://{HOST}/hook", payload={})
    assert "webhook_url" in refused.value.message_dict
