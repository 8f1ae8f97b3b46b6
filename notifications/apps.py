"""The app's configuration: registers the system checks, the record of lifted suppressions
and, with django-anymail, its bounce and complaint signals."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notification queue"  # the admin section: not "Notifications > Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import checks  # noqa: F401 - registers the system checks
        from notifications.services.suppression import connect_anymail, connect_lifts

        connect_anymail()  # with django-anymail installed: its bounces and complaints suppress addresses
        connect_lifts()  # deleting a suppression remembers the lift: a replayed old bounce leaves it lifted
