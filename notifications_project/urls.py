import importlib.util
from pathlib import Path

from django.contrib import admin
from django.http import FileResponse, HttpRequest
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.generic import RedirectView

from notifications_project import views

FAVICON = Path(__file__).resolve().parent / "static" / "notifications_project" / "favicon.ico"


@cache_control(public=True, max_age=86400)
def favicon(request: HttpRequest) -> FileResponse:
    """The icon browsers ask every page for: served here, so the demo's log has no 404 per page."""
    return FileResponse(FAVICON.open("rb"), content_type="image/x-icon")


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/notifications/notification/")),
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    # Recipients' public pages (docs/recipients.md) and the signed-in user's inbox (docs/inbox.md).
    path("notifications/", include("notifications.urls")),
    # A page of the demo site with the inbox bell ({% inbox_badge %}) in its header.
    path("demo/", views.home, name="demo-home"),
]

# The queue's Prometheus metrics, when prometheus_client is installed: staff users, or a
# scraper sending NOTIFICATIONS_METRICS_TOKEN as a bearer token (docs/operations.md).
if importlib.util.find_spec("prometheus_client") is not None:
    urlpatterns.append(path("metrics/notifications/", include("notifications.metrics")))
