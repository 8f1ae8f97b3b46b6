"""The recipients' public pages: one-click unsubscribe (RFC 8058) and the preference centre.

Include them in the site's URLconf, e.g. `path("notifications/", include("notifications.urls"))`,
and set NOTIFICATIONS_PUBLIC_URL: the links in email are built on it. No login: the signed
link is the key (`notifications.content.links`).
"""

from django.urls import path

from notifications.recipients import views

app_name = "notifications"
urlpatterns = [
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
    path("preferences/<str:token>/", views.preference_centre, name="preferences"),
]
