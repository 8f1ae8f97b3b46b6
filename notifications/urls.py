"""The recipients' public pages (one-click unsubscribe, RFC 8058, and the preference
centre) and the signed-in user's inbox.

Include them in the site's URLconf, e.g. `path("notifications/", include("notifications.urls"))`,
and set NOTIFICATIONS_PUBLIC_URL: the links in email are built on it. No login: the signed
link is the key (`notifications.content.links`). The inbox is the signed-in user's own
(`notifications.inbox.web`).
"""

import importlib.util

from django.urls import URLPattern, URLResolver, include, path

from notifications.inbox.web import views as inbox
from notifications.recipients import views

app_name = "notifications"
urlpatterns: list[URLPattern | URLResolver] = [
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
    path("preferences/<str:token>/", views.preference_centre, name="preferences"),
    # The signed-in user's inbox (docs/inbox.md): the page and its JSON endpoints.
    path("inbox/", inbox.page, name="inbox"),
    path("inbox/counts", inbox.counts, name="inbox-counts"),
    path("inbox/messages", inbox.messages, name="inbox-messages"),
    path("inbox/mark", inbox.mark, name="inbox-mark"),
]

# The HTTP API for other services (docs/api.md), when its extra (django-ninja) is installed.
if importlib.util.find_spec("ninja") is not None:
    urlpatterns.append(path("api/v1/", include("notifications.http_api.urls")))
