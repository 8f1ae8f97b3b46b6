"""The API's URLconf: ninja's patterns, each behind `guard.guarded`, and problem details
for any other path below. `notifications.urls` includes it at `api/v1/` when ninja is installed."""

from django.urls import URLPattern, URLResolver, re_path

from notifications.http_api.endpoints import api
from notifications.http_api.guard import guarded, not_found

app_name = "api"  # within the app's namespace: notifications:api:<name>
patterns = api.urls[0]
for pattern in patterns:
    if isinstance(pattern, URLPattern):
        pattern.callback = guarded(pattern.callback)

urlpatterns: list[URLPattern | URLResolver] = [
    *patterns,
    re_path(r"^(?P<rest>.*)$", not_found),
]
