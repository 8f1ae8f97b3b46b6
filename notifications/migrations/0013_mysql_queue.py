# MariaDB/MySQL as a queue. Keys unique among rows that have one there too
# (notifications.models.keys): the key is compared byte for byte and a generated column carries
# the constraint. The due index in the claim's order there (notifications.models.indexes).
# Nothing changes on SQLite and PostgreSQL: their partial unique index is the same
# constraint, their due index the same index.

from django.db import migrations

import notifications.models.indexes
import notifications.models.keys
from django.db import models

CONSTRAINT = notifications.models.keys.KeyConstraint(field='key', name='notification_key_unique')
DUE_CONDITION = models.Q(('next_fire_at__isnull', False), ('paused_at__isnull', True))
OLD_DUE_INDEX = models.Index(condition=DUE_CONDITION, fields=['next_fire_at', 'error_count'], name='notification_due_idx')
DUE_INDEX = notifications.models.indexes.DueIndex(condition=DUE_CONDITION, fields=['next_fire_at', 'error_count'], name='notification_due_idx')


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != 'mysql':
        return
    Notification = apps.get_model('notifications', 'Notification')
    notifications.models.keys.alter_mysql_collation(Notification, schema_editor, exact=True)
    schema_editor.add_constraint(Notification, CONSTRAINT)
    schema_editor.remove_index(Notification, OLD_DUE_INDEX)
    schema_editor.add_index(Notification, DUE_INDEX)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != 'mysql':
        return
    Notification = apps.get_model('notifications', 'Notification')
    schema_editor.remove_index(Notification, DUE_INDEX)
    schema_editor.add_index(Notification, OLD_DUE_INDEX)
    schema_editor.remove_constraint(Notification, CONSTRAINT)
    notifications.models.keys.alter_mysql_collation(Notification, schema_editor, exact=False)


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0012_metrics'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name='notification', name='notification_key_unique'),
                migrations.AddConstraint(model_name='notification', constraint=CONSTRAINT),
                migrations.RemoveIndex(model_name='notification', name='notification_due_idx'),
                migrations.AddIndex(model_name='notification', index=DUE_INDEX),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
