"""Per-target metrics stay bounded (issue 34 finding 5): whoever chooses webhook URLs does
not choose how many series a scrape returns, nor how many totals the database keeps.

The busiest `MAX_TARGET_SERIES` targets keep a series of their own, the rest are summed as
`other`; the totals of targets idle for `TARGET_IDLE` are folded into `other` by the tick's
housekeeping. The per-channel counters never go down.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.api import run_tick
from notifications.health import monitoring
from notifications.models import Tally
from notifications.store import tallies
from tests.test_metrics import URL, parse

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-0123456789abcdef"


def many_targets(count: int) -> dict[str, int]:
    """`count` webhook targets, each with its own number of deliveries (the last the busiest)."""
    targets = {f"127.0.{i // 200}.{i % 200}:{8000 + i}": i + 1 for i in range(count)}
    tallies.add_deliveries({("webhook", target, "delivered"): n for target, n in targets.items()})
    tallies.add_deliveries({("webhook", target, "failed"): 1 for target in targets})
    tallies.add_deliveries({("email", "email", "delivered"): 5})
    return targets


def scraped(client, settings) -> dict[str, dict[tuple, float]]:
    settings.NOTIFICATIONS_METRICS_TOKEN = TOKEN
    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return parse(response.content.decode())


def target_labels(samples) -> set[str]:
    return {dict(labels)["target"] for labels in samples["notifications_target_deliveries_total"]}


def test_300_targets_give_at_most_the_busiest_n_and_other(client, settings):
    targets = many_targets(300)

    samples = scraped(client, settings)

    labels = target_labels(samples)
    limit = monitoring.MAX_TARGET_SERIES
    assert len(labels) <= limit + 1
    busiest = sorted(targets, key=lambda t: -targets[t])[:limit]  # `email` (5) is not among them
    assert {*busiest, "other"} == labels
    by_target = samples["notifications_target_deliveries_total"]
    total = sum(
        v for k, v in by_target.items() if dict(k)["channel"] == "webhook" and dict(k)["outcome"] == "delivered"
    )
    channel = samples["notifications_deliveries_total"][(("channel", "webhook"), ("outcome", "delivered"))]
    assert total == channel == sum(targets.values())  # nothing lost in `other`


def test_the_bound_is_by_deliveries_then_by_name():
    tallies.add_deliveries({("webhook", name, "delivered"): n for name, n in (("b", 5), ("a", 5), ("c", 9), ("d", 1))})

    snapshot = monitoring.read(max_targets=2)

    assert snapshot.deliveries == {
        ("webhook", "c", "delivered"): 9,
        ("webhook", "a", "delivered"): 5,
        ("webhook", "other", "delivered"): 6,
    }


def test_a_tick_folds_the_totals_of_idle_targets_into_other_and_no_counter_goes_down(transactional_db):
    many_targets(30)
    now = timezone.now()
    old = now - tallies.TARGET_IDLE - timedelta(minutes=1)
    Tally.objects.filter(target__startswith="127.0.0.").exclude(target="127.0.0.29:8029").update(updated_at=old)
    before = monitoring.read().by_channel()

    run_tick(now=now)

    kept = set(Tally.objects.filter(kind=Tally.Kind.DELIVERY).values_list("target", flat=True))
    assert kept == {"127.0.0.29:8029", "email", "other"}
    assert monitoring.read().by_channel() == before
    other = dict(Tally.objects.filter(target="other", channel="webhook").values_list("outcome", "count"))
    assert other == {"delivered": sum(range(1, 30)), "failed": 29}


def test_folding_again_adds_to_other():
    tallies.add_deliveries({("webhook", "a.example", "delivered"): 2, ("webhook", "other", "delivered"): 3})
    later = timezone.now() + tallies.TARGET_IDLE + timedelta(minutes=1)
    assert tallies.fold_idle(later) == 1  # `other` itself is never folded
    assert dict(Tally.objects.values_list("target", "count")) == {"other": 5}
