"""Prometheus metrics of the queue, read from the database at each scrape.

Needs `prometheus_client` (`pip install "django-notification-queue[prometheus]"`).
Ticks are short-lived cron processes, so nothing is counted in a process's memory: a
scrape reads the totals the ticks keep in the database (`notifications.tallies`) and the
queue's state (`notifications.monitoring`, four queries). Three ways to expose them:

- the view, opt-in by the site's URLconf: `path("metrics/notifications/",
  include("notifications.metrics"))`. It answers staff users holding
  `notifications.view_notification`, and a scraper that sends
  `Authorization: Bearer <NOTIFICATIONS_METRICS_TOKEN>` (when that setting is set);
  anyone else gets 403.
- `NotificationsCollector`, for a site that already exposes a registry
  (`prometheus_client.REGISTRY.register(NotificationsCollector())`, e.g. next to
  django-prometheus): its scrapes then include the queue's metrics.
- `manage.py notifications_status --prometheus`: the text format on stdout, for
  node_exporter's textfile collector.

Metrics (labels never carry a secret: a target is a webhook's host and port, or `email`):

- `notifications_deliveries_total{channel,outcome}`: outcome `delivered`, `failed`,
  `dead_lettered`, `deferred`, `expired` (`notifications.tallies` says what each counts);
- `notifications_target_deliveries_total{channel,target,outcome}`: the same by target;
- `notifications_rows{state}`: rows per state of the admin's filter;
- `notifications_in_flight`: rows a tick holds a live claim on;
- `notifications_oldest_due_seconds`: the age of the oldest due, unsent row (0 when none);
- `notifications_tick_duration_seconds`: a histogram of the ticks' durations;
- `notifications_open_circuits`: targets whose circuit is open or half-open;
- `notifications_last_tick_timestamp_seconds`: when the last tick finished (Unix time).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - the extra is optional
    raise ImportError(
        'notifications.metrics needs prometheus_client: pip install "django-notification-queue[prometheus]"'
    ) from exc

from . import monitoring
from .conf import app_settings

# The classic text format every Prometheus version reads (generate_latest writes it).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class NotificationsCollector(Collector):
    """The queue's metrics, read from the database at each `collect()` (four queries)."""

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
    ]
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


def allowed(request: HttpRequest) -> bool:
    """A staff user holding `notifications.view_notification`, or the bearer of
    `NOTIFICATIONS_METRICS_TOKEN` (compared in constant time; never when it is blank)."""
    token = app_settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if isinstance(token, str) and token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode())
    user = request.user if hasattr(request, "user") else None
    return bool(user and user.is_active and user.is_staff and user.has_perm("notifications.view_notification"))


@never_cache
@require_GET
def view(request: HttpRequest) -> HttpResponse:
    """The queue's metrics for a Prometheus scrape (see the module's docstring for access)."""
    if not allowed(request):
        raise PermissionDenied
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)


app_name = "notifications_metrics"
urlpatterns = [path("", view, name="metrics")]
