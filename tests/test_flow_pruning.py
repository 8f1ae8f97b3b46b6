"""Flow-control tables do not grow without bound, and what operators see of them stays short.

20,000 rows to 19,922 hosts left 14,604 Target and RateBucket rows nobody pruned; the list
header named all 14,604 open circuits (4.5 s a page) and `notifications_status` printed
1.4 MB. Each tick now prunes idle rows (a bounded batch), and the header and the status
show how many circuits are open and the worst few.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from notifications.api import run_tick
from notifications.health.flow import SHOWN
from notifications.models import Notification, RateBucket, Target, TickRun

pytestmark = pytest.mark.django_db


def test_a_tick_prunes_idle_targets_and_full_buckets_and_keeps_the_rest():
    now = timezone.now()
    long_ago = now - timedelta(days=2)
    Target.objects.bulk_create(
        [Target(key=f"gone{n}.example.com", failures=1, updated_at=long_ago) for n in range(50)]
        + [
            Target(key=f"dead{n}.example.com", state="open", failures=10, retry_at=long_ago, updated_at=long_ago)
            for n in range(20)
        ]
        + [
            Target(key="by-hand.example.com", state="open", manual=True, updated_at=long_ago),
            Target(key="holding.example.com", state="open", retry_at=long_ago, updated_at=long_ago),
            Target(key="recent.example.com", failures=2, updated_at=now),
        ]
    )
    Notification.objects.create(
        channels=["webhook"], webhook_url="https://holding.example.com/", timezone="UTC", held_for="holding.example.com"
    )
    stamp = now.timestamp()
    RateBucket.objects.bulk_create(
        [
            RateBucket(key="idle.example.com 5/s", tokens=0, stamp=stamp - 10),  # a second passed: full again
            RateBucket(key="idle.example.com 600/m", tokens=3, stamp=stamp - 120),
            RateBucket(key="busy.example.com 5/s", tokens=0, stamp=stamp),
            RateBucket(key="email 50000/d", tokens=10, stamp=stamp - 3600),  # its day is not over
        ]
    )

    run_tick()

    assert sorted(Target.objects.values_list("key", flat=True)) == [
        "by-hand.example.com",
        "holding.example.com",
        "recent.example.com",
    ]
    assert sorted(RateBucket.objects.values_list("key", flat=True)) == ["busy.example.com 5/s", "email 50000/d"]


@pytest.fixture
def many_open():
    now = timezone.now()
    TickRun.objects.create(started_at=now, finished_at=now, host="cron-1", pid=1)
    Target.objects.bulk_create(
        Target(key=f"down{n:02}.example.com", state="open", failures=10 + n, retry_at=now + timedelta(minutes=1))
        for n in range(SHOWN + 5)
    )


def test_the_list_header_counts_open_circuits_and_names_the_worst_few(admin_client, many_open):
    page = admin_client.get(reverse("admin:notifications_notification_changelist")).content.decode()

    assert f"{SHOWN + 5} circuits open:" in page
    assert page.count('class="nq-open-circuit"') == SHOWN
    assert "down14.example.com" in page and "down00.example.com" not in page  # the longest streaks
    assert ", and 5 more." in page


def test_the_status_counts_them_too(capsys, many_open):
    call_command("notifications_status")
    lines = [line for line in capsys.readouterr().out.splitlines() if "circuit open:" in line]
    assert len(lines) == SHOWN + 1
    assert lines[-1].endswith(f"circuit open: 5 more ({SHOWN + 5} in all; the Targets list has them)")

    call_command("notifications_status", "--json")
    facts = json.loads(capsys.readouterr().out)
    assert facts["open_circuits_total"] == SHOWN + 5 and len(facts["open_circuits"]) == SHOWN
