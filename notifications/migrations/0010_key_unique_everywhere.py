# Keys unique among rows that have one on MariaDB/MySQL too (notifications.keys): there the
# key is compared byte for byte and a generated column carries the constraint. Nothing
# changes on SQLite and PostgreSQL, whose partial unique index is the same constraint.

from django.db import migrations

import notifications.keys

CONSTRAINT = notifications.keys.KeyConstraint(field='key', name='notification_key_unique')


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != 'mysql':
        return
    Notification = apps.get_model('notifications', 'Notification')
    notifications.keys.alter_mysql_collation(Notification, schema_editor, exact=True)
    schema_editor.add_constraint(Notification, CONSTRAINT)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != 'mysql':
        return
    Notification = apps.get_model('notifications', 'Notification')
    schema_editor.remove_constraint(Notification, CONSTRAINT)
    notifications.keys.alter_mysql_collation(Notification, schema_editor, exact=False)


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0009_firing_due_at'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name='notification', name='notification_key_unique'),
                migrations.AddConstraint(model_name='notification', constraint=CONSTRAINT),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
