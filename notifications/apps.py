"""The app's configuration: installs the channels' part of a row's validation into the
models, registers the system checks, the record of lifted suppressions and, with
django-anymail, its bounce and complaint signals; keeps link tokens out of Django's request
logs and the channels' credentials out of its error reports."""

from django.apps import AppConfig
from django.views import debug


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notification queue"  # the admin section: not "Notifications > Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import (
            checks,  # noqa: F401 - registers the system checks
            compat,
        )
        from notifications.channels import checks as channel_checks  # noqa: F401 - each channel's own checks
        from notifications.channels import validation
        from notifications.inbox.web import checks as inbox_web_checks  # noqa: F401 - the inbox's web settings
        from notifications.models import channel_hook
        from notifications.recipients import logs as token_logs
        from notifications.services.suppression import connect_anymail, connect_lifts
        from notifications.tasks import checks as task_checks  # noqa: F401 - W070 on Django 5.2

        channel_hook.install(validation)  # the models validate a row's channels without naming them
        connect_anymail()  # with django-anymail installed: its bounces and complaints suppress addresses
        connect_lifts()  # deleting a suppression remembers the lift: a replayed old bounce leaves it lifted
        token_logs.install()  # a 4xx/403 on an unsubscribe or preferences link logs its path: not its token
        # An Apprise URL's credentials, under OPTIONS["urls"], masked like a *_PASSWORD setting.
        reporters: set[type] = {debug.SafeExceptionReporterFilter, type(debug.get_default_exception_reporter_filter())}
        for reporter in reporters:
            compat.hide_setting_keys(reporter, compat.HIDDEN_OPTION_KEYS)
