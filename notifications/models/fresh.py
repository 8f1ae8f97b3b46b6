"""A new, unsaved Notification built without Django's per-field `Model.__init__` work.

`Notification(**fields)` asks each of its fifty-odd fields for its default, one call
each, and sends `pre_init`/`post_init`. `new(**fields)` gives the same instance: the
defaults that are constants (a blank string, None, a choice) are read once per process,
the callable ones (`dict`, `uuid4`, the site's time zone) still called for every row, so
no two rows share a mutable default. While anything listens to `pre_init` or `post_init`
for Notification, or a name is not a field's, it is `Notification(**fields)` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import NOT_PROVIDED, signals
from django.db.models.base import ModelState

from notifications.models.notification import Notification

_plan: tuple[dict[str, Any], list[tuple[str, Callable[[], Any]]], frozenset[str]] | None = None


def new(**fields: Any) -> Notification:
    """An unsaved Notification with `fields` set and every other field at its default."""
    constants, factories, names = _defaults()
    if not names.issuperset(fields) or _listened():
        return Notification(**fields)
    row = Notification.__new__(Notification)
    row._state = ModelState()
    values = dict(constants)
    for attname, make in factories:
        if attname not in fields:
            values[attname] = make()
    values.update(fields)
    row.__dict__.update(values)
    return row


def _listened() -> bool:
    return signals.pre_init.has_listeners(Notification) or signals.post_init.has_listeners(Notification)


def _defaults() -> tuple[dict[str, Any], list[tuple[str, Callable[[], Any]]], frozenset[str]]:
    """(attname -> a constant default, [(attname, what makes its default)], the field names
    `new` takes: those whose name is their attribute)."""
    global _plan
    if _plan is None:
        constants: dict[str, Any] = {}
        factories: list[tuple[str, Callable[[], Any]]] = []
        for field in Notification._meta.concrete_fields:
            if field.has_default() and not callable(field.default):
                constants[field.attname] = field.default  # as Django's `_get_default`: the one object
            elif not field.has_default() and field.db_default is NOT_PROVIDED:
                constants[field.attname] = field.get_default()  # None or "": immutable
            else:
                factories.append((field.attname, field.get_default))
        names = frozenset(f.name for f in Notification._meta.concrete_fields if f.name == f.attname)
        _plan = (constants, factories, names)
    return _plan
