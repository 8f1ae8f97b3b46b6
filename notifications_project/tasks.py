"""The demo's task (Django 6.0+, `manage.py demo`): a `django.tasks` task run by `runtick`."""

from django.tasks import task


@task()
def count_waiting() -> int:
    """How many rows of the queue wait: a task that reads the database, as a site's do."""
    from notifications.models import Notification

    return Notification.objects.count()
