"""The app's configuration: installs the channels' part of a row's validation into the
models, registers the system checks, the record of lifted suppressions and, with
django-anymail, its bounce and complaint signals."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notification queue"  # the admin section: not "Notifications > Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import checks  # noqa: F401 - registers the system checks
        from notifications.channels import checks as channel_checks  # noqa: F401 - each channel's own checks
        from notifications.channels import validation
        from notifications.models import channel_hook
        from notifications.services.suppression import connect_anymail, connect_lifts
        from notifications.tasks import checks as task_checks  # noqa: F401 - W070 on Django 5.2

        channel_hook.install(validation)  # the models validate a row's channels without naming them
        connect_anymail()  # with django-anymail installed: its bounces and complaints suppress addresses
        connect_lifts()  # deleting a suppression remembers the lift: a replayed old bounce leaves it lifted
