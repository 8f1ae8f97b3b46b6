"""The queue's Prometheus metrics as prometheus_client objects: the collector and the text.

The public entry point is `notifications.metrics` (the view, the URLconf, the collector);
`notifications_status --prometheus` prints `exposition()`. Needs prometheus_client.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from notifications.health import monitoring

# The classic text format every Prometheus version reads (generate_latest writes it).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class NotificationsCollector(Collector):
    """The queue's metrics, read from the database at each `collect()` (six queries)."""

    def collect(self) -> Iterator[Metric]:
        return iter(families(monitoring.read()))

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at collect time only: registering costs no query


def families(snapshot: monitoring.Snapshot) -> list[Metric]:
    """The metric families of a snapshot."""
    deliveries = CounterMetricFamily(
        "notifications_deliveries", "Deliveries by channel and outcome.", labels=["channel", "outcome"]
    )
    for (channel, outcome), count in snapshot.by_channel().items():
        deliveries.add_metric([channel, outcome], count)
    by_target = CounterMetricFamily(
        "notifications_target_deliveries",
        "Deliveries by channel, target (a webhook's host, or email) and outcome.",
        labels=["channel", "target", "outcome"],
    )
    for (channel, target, outcome), count in sorted(snapshot.deliveries.items()):
        by_target.add_metric([channel, target, outcome], count)
    rows = GaugeMetricFamily("notifications_rows", "Rows per state (the admin's states).", labels=["state"])
    for state, count in snapshot.rows.items():
        rows.add_metric([state], count)
    ticks = HistogramMetricFamily("notifications_tick_duration_seconds", "How long each tick took.")
    ticks.add_metric([], [(_bound(b), n) for b, n in snapshot.tick_buckets], sum_value=snapshot.tick_seconds)
    out: list[Metric] = [
        deliveries,
        by_target,
        rows,
        GaugeMetricFamily("notifications_in_flight", "Rows a tick holds a live claim on.", value=snapshot.in_flight),
        GaugeMetricFamily(
            "notifications_oldest_due_seconds",
            "Age of the oldest due, unsent row (0 when none).",
            value=snapshot.oldest_due_seconds,
        ),
        ticks,
        GaugeMetricFamily(
            "notifications_open_circuits",
            "Targets whose circuit is open or half-open.",
            value=snapshot.open_circuits,
        ),
        GaugeMetricFamily(
            "notifications_open_digests",
            "Digests collecting rows, or due and not yet sent.",
            value=snapshot.open_digests,
        ),
    ]
    skipped = CounterMetricFamily(
        "notifications_skipped_firings",
        "Firings not sent because the recipient turned their category off (skipped) or a throttle (throttled).",
        labels=["category", "reason"],
    )
    for (category, reason), count in sorted(snapshot.skipped.items()):
        skipped.add_metric([category, reason], count)
    out.append(skipped)
    if snapshot.last_tick_at is not None:
        out.append(
            GaugeMetricFamily(
                "notifications_last_tick_timestamp_seconds",
                "When the last tick finished (Unix time).",
                value=snapshot.last_tick_at.timestamp(),
            )
        )
    return out


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def registry() -> CollectorRegistry:
    """A registry holding the queue's collector alone."""
    own = CollectorRegistry(auto_describe=False)
    own.register(NotificationsCollector())
    return own


def exposition() -> bytes:
    """The queue's metrics in Prometheus' text format."""
    return bytes(generate_latest(registry()))
