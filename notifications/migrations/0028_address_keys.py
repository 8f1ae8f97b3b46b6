# Who a row names, as an index (notifications.models.address_keys): erasure's lookup.
#
# The table's foreign key is the database's own, ON DELETE CASCADE (and ON UPDATE
# CASCADE): every delete of a row takes its keys, at no statement of its own (Django
# 5.2 cannot say so in the model: it sees DO_NOTHING and no constraint). SQLite adds a
# foreign key only as the table is created, so there the table is created by hand.
# Then every existing row is indexed.

import django.db.models.deletion
from django.db import migrations, models

TABLE = "notifications_addresskey"
ROWS = "notifications_notification"
CONSTRAINT = "notification_address_row_fk"


def create(apps, schema_editor):
    model = apps.get_model("notifications", "AddressKey")
    connection = schema_editor.connection
    quote = schema_editor.quote_name
    if connection.vendor == "sqlite":
        schema_editor.execute(
            f"CREATE TABLE {quote(TABLE)} ("
            f"{quote('id')} integer NOT NULL PRIMARY KEY AUTOINCREMENT, "
            f"{quote('key')} varchar(64) NOT NULL, "
            f"{quote('notification_id')} bigint NOT NULL REFERENCES {quote(ROWS)} ({quote('id')}) "
            "ON DELETE CASCADE ON UPDATE CASCADE DEFERRABLE INITIALLY DEFERRED)"
        )
        for index in model._meta.indexes:
            schema_editor.add_index(model, index)
        return
    schema_editor.create_model(model)
    schema_editor.execute(
        f"ALTER TABLE {quote(TABLE)} ADD CONSTRAINT {quote(CONSTRAINT)} FOREIGN KEY ({quote('notification_id')}) "
        f"REFERENCES {quote(ROWS)} ({quote('id')}) ON DELETE CASCADE ON UPDATE CASCADE"
    )


def drop(apps, schema_editor):
    schema_editor.delete_model(apps.get_model("notifications", "AddressKey"))


def backfill(apps, schema_editor):
    from notifications.models.address_keys import index_all

    index_all(
        schema_editor.connection.alias,
        model=apps.get_model("notifications", "Notification"),
        key_model=apps.get_model("notifications", "AddressKey"),
    )


class Migration(migrations.Migration):

    dependencies = [
        ("notifications", "0027_escalation"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AddressKey",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("key", models.CharField(max_length=64)),
                        (
                            "notification",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="+",
                                to="notifications.notification",
                            ),
                        ),
                    ],
                    options={
                        "indexes": [
                            models.Index(fields=["key", "notification"], name="notification_address_key_idx"),
                            models.Index(fields=["notification"], name="notification_address_row_idx"),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(create, drop, atomic=False),  # DDL: MariaDB cannot roll it back
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
