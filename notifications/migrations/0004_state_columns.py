"""Row state in columns of its own.

`pending_channels` (the channels the current firing still owes) was comma-separated text,
blank for every channel; it becomes a JSON list, NULL for every channel. The channels a
partial failure left undelivered were parsed back out of `last_error` (`partial: a,b`);
they get a column, `failed_channels`, NULL when the last firing was not a partial failure.
`last_error` keeps its text. Reversible: the list goes back to text, and `last_error`
still holds what `failed_channels` said.
"""

from django.db import migrations, models

PARTIAL_PREFIX = "partial: "  # as in notifications.states; frozen here as it was when written


def _names(text):
    return [name.strip() for name in text.split(",") if name.strip()]


def to_columns(apps, schema_editor):
    Notification = apps.get_model("notifications", "Notification")
    rows = Notification.objects.using(schema_editor.connection.alias)
    # Only rows that owe part of a firing or failed partially change: a few, read first.
    for pk, pending in list(rows.exclude(pending_channels="").values_list("pk", "pending_channels")):
        rows.filter(pk=pk).update(pending_list=_names(pending) or None)
    partial = rows.filter(last_error__startswith=PARTIAL_PREFIX)
    for pk, error in list(partial.values_list("pk", "last_error")):
        # An empty list keeps a row whose text named no channel a partial failure, as it was.
        rows.filter(pk=pk).update(failed_channels=_names(error[len(PARTIAL_PREFIX) :]))


def to_text(apps, schema_editor):
    Notification = apps.get_model("notifications", "Notification")
    rows = Notification.objects.using(schema_editor.connection.alias)
    for pk, pending in list(rows.filter(pending_list__isnull=False).values_list("pk", "pending_list")):
        if isinstance(pending, list) and pending:
            rows.filter(pk=pk).update(pending_channels=",".join(str(name) for name in pending))


class Migration(migrations.Migration):

    dependencies = [
        ("notifications", "0003_tickrun_clock_offset"),
    ]

    operations = [
        migrations.AddField(
            model_name="notification",
            name="failed_channels",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="notification",
            name="pending_list",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(to_columns, to_text, elidable=False),
        migrations.RemoveField(
            model_name="notification",
            name="pending_channels",
        ),
        migrations.RenameField(
            model_name="notification",
            old_name="pending_list",
            new_name="pending_channels",
        ),
    ]
