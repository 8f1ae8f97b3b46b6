"""The due index, shaped for each database's claim.

SQLite and PostgreSQL: `(next_fire_at, error_count)` over rows that can come due (a
partial index). MariaDB and MySQL have no partial index, and their SELECT ... FOR UPDATE
SKIP LOCKED locks every row it reads before the LIMIT is applied: with that index the
claim reads every due row, sorts them (ORDER BY next_fire_at, id) and locks them all,
so the ticks beside it find nothing to claim. There the index is `(next_fire_at)`, which
InnoDB extends with the primary key: `(next_fire_at, id)`, the claim's order, so it
reads and locks rows in that order and stops at the LIMIT.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from notifications.databases import is_mysql


class DueIndex(models.Index):
    """A `models.Index` that MariaDB/MySQL build on its first field alone (see the module)."""

    def create_sql(self, model: Any, schema_editor: BaseDatabaseSchemaEditor, using: str = "", **kwargs: Any) -> Any:
        if is_mysql(schema_editor.connection):  # no condition there; the first field, then the primary key
            first_field = models.Index(fields=self.fields[:1], name=self.name)
            return first_field.create_sql(model, schema_editor, using, **kwargs)
        return super().create_sql(model, schema_editor, using, **kwargs)


class WholeIndex(models.Index):
    """A partial `models.Index` that MariaDB/MySQL, which have no partial index, build over
    the whole table (Django would leave it out there)."""

    def create_sql(self, model: Any, schema_editor: BaseDatabaseSchemaEditor, using: str = "", **kwargs: Any) -> Any:
        if is_mysql(schema_editor.connection):
            return models.Index(fields=self.fields, name=self.name).create_sql(model, schema_editor, using, **kwargs)
        return super().create_sql(model, schema_editor, using, **kwargs)
