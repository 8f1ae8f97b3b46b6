"""Prometheus metrics of the queue, read from the database at each scrape.

Needs `prometheus_client` (`pip install "django-notification-queue[prometheus]"`).
Ticks are short-lived cron processes, so nothing is counted in a process's memory: a
scrape reads the totals the ticks keep in the database (`notifications.store.tallies`) and the
queue's state (`notifications.health.monitoring`, six queries). Three ways to expose them:

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
  `dead_lettered`, `deferred`, `expired` (`notifications.store.tallies` says what each counts);
- `notifications_target_deliveries_total{channel,target,outcome}`: the same by target;
- `notifications_rows{state}`: rows per state of the admin's filter;
- `notifications_in_flight`: rows a tick holds a live claim on;
- `notifications_oldest_due_seconds`: the age of the oldest due, unsent row (0 when none);
- `notifications_tick_duration_seconds`: a histogram of the ticks' durations;
- `notifications_open_circuits`: targets whose circuit is open or half-open;
- `notifications_skipped_firings_total{category,reason}`: firings not sent because the
  recipient turned their category off (`skipped`) or its throttle held them (`throttled`);
- `notifications_open_digests`: digests collecting rows, or due and not yet sent;
- `notifications_last_tick_timestamp_seconds`: when the last tick finished (Unix time).
"""

from __future__ import annotations

import hmac

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

try:
    from notifications.health.prometheus import (
        CONTENT_TYPE,
        NotificationsCollector,
        exposition,
        families,
        registry,
    )
except ImportError as exc:  # pragma: no cover - the extra is optional
    raise ImportError(
        'notifications.metrics needs prometheus_client: pip install "django-notification-queue[prometheus]"'
    ) from exc

from notifications.conf import app_settings

__all__ = ["CONTENT_TYPE", "NotificationsCollector", "allowed", "exposition", "families", "registry", "view"]


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
