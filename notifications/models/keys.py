"""The `key` column: the host's name for a row, unique among rows that have one, on every database.

SQLite and PostgreSQL enforce it with a partial unique index (`WHERE key <> ''`).
MariaDB and MySQL have no partial index, and Django creates no conditional constraint
there at all (models.W036). There the constraint is a stored generated column holding
the key, or NULL for a blank one, under a plain unique index: InnoDB lets any number of
NULLs in, and checks the rest under its index locks, so concurrent inserts of one key
leave one row, as the partial index does elsewhere.

Both halves compare keys as PostgreSQL does, byte for byte: the `key` column (and the
generated one) take a binary collation on MariaDB/MySQL, so `Invoice-7` and `invoice-7`
are two keys, and `a` and `a ` too (a NO PAD collation where the server has one), as
they are on SQLite and PostgreSQL. A site's default collation (`utf8mb4_general_ci`,
`utf8mb4_0900_ai_ci`) would fold case and accents.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Q

from notifications.databases import exact_collation, is_mysql

# The generated column that carries the constraint on MariaDB/MySQL (nothing reads it).
MYSQL_KEY_COLUMN = "key_if_set"


class KeyField(models.CharField):  # type: ignore[type-arg]
    """A CharField compared byte for byte: a binary collation on MariaDB/MySQL.

    Migrations see a plain CharField (`deconstruct`), so SQLite and PostgreSQL never
    see a change; the app's migration 0011 gives the MariaDB/MySQL column its collation.
    A later migration that alters `key` must keep it (`schema_editor.alter_field` with
    this class as the new field does).
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        parameters = super().db_parameters(connection)
        if is_mysql(connection):
            parameters["collation"] = exact_collation(connection)
        return parameters

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.CharField", args, kwargs


class KeyConstraint(models.UniqueConstraint):
    """`UniqueConstraint(fields=[field], condition=~Q(field=""))`, enforced on MariaDB/MySQL too.

    Elsewhere exactly Django's partial unique index. On MariaDB/MySQL: the generated
    column `MYSQL_KEY_COLUMN` (NULLIF(key, ''), stored, binary collation) and a unique
    index of the constraint's name on it.
    """

    def __init__(self, *, field: str, name: str) -> None:
        super().__init__(fields=[field], condition=~Q(**{field: ""}), name=name)

    def deconstruct(self) -> Any:
        path, _args, _kwargs = super().deconstruct()
        return path, (), {"field": self.fields[0], "name": self.name}

    def _check(self, model: Any, connection: BaseDatabaseWrapper) -> list[checks.CheckMessage]:
        errors = super()._check(model, connection)  # type: ignore[misc]  # private: see compat
        if is_mysql(connection):  # enforced through the generated column: nothing is missing
            errors = [error for error in errors if error.id != "models.W036"]
        return list(errors)

    def constraint_sql(self, model: Any, schema_editor: BaseDatabaseSchemaEditor | None) -> Any:
        if schema_editor is None or not is_mysql(schema_editor.connection):
            return super().constraint_sql(model, schema_editor)
        # CREATE TABLE (a model created from its current state): the column and index follow it.
        schema_editor.deferred_sql.append(self.create_sql(model, schema_editor))
        return None

    def create_sql(self, model: Any, schema_editor: BaseDatabaseSchemaEditor | None) -> Any:
        if schema_editor is None or not is_mysql(schema_editor.connection):
            return super().create_sql(model, schema_editor)
        quote = schema_editor.quote_name
        field = model._meta.get_field(self.fields[0])
        connection = schema_editor.connection
        return (
            f"ALTER TABLE {quote(model._meta.db_table)} "
            f"ADD COLUMN {quote(MYSQL_KEY_COLUMN)} {field.db_type(connection)} "
            f"COLLATE {exact_collation(connection)} AS (NULLIF({quote(field.column)}, '')) STORED, "
            f"ADD CONSTRAINT {quote(self.name)} UNIQUE ({quote(MYSQL_KEY_COLUMN)})"
        )

    def remove_sql(self, model: Any, schema_editor: BaseDatabaseSchemaEditor | None) -> Any:
        if schema_editor is None or not is_mysql(schema_editor.connection):
            return super().remove_sql(model, schema_editor)
        quote = schema_editor.quote_name
        return (
            f"ALTER TABLE {quote(model._meta.db_table)} "
            f"DROP INDEX {quote(self.name)}, DROP COLUMN {quote(MYSQL_KEY_COLUMN)}"
        )


def alter_mysql_collation(model: Any, schema_editor: BaseDatabaseSchemaEditor, *, exact: bool) -> None:
    """MariaDB/MySQL: give `key` its binary collation (`exact`), or the table's default back.

    Django sees no change between a CharField and a KeyField (the same deconstruction),
    so migration 0011 says it here.
    """
    field = model._meta.get_field("key")
    connection = schema_editor.connection
    collation = f" COLLATE {exact_collation(connection)}" if exact else ""
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"ALTER TABLE {quote(model._meta.db_table)} MODIFY {quote(field.column)} "
        f"{field.db_type(connection)}{collation} NOT NULL DEFAULT ''"
    )
