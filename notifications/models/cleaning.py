"""Django's `Model.clean_fields`, run only on the fields a cheap look cannot clear.

`Model.clean_fields` converts and validates every field (about fifty on a Notification),
and a row scheduled by the app has most of them at their defaults. Each field here has a
look (`_look`) that answers True only when Django's `field.clean` would return the value
unchanged and refuse nothing: a string within its length and choices (a TextChoices member too), an aware or naive
datetime, an int within the column's range, JSON that encodes. Every other value goes
through `field.clean` itself, so each message and the field it names are Django's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models

from notifications.models import validation

if TYPE_CHECKING:
    from django.db.models import Field

    from notifications.models.notification import Notification

Look = Callable[[Any], bool]
_looks: dict[type[Notification], list[tuple[Field[Any, Any], Look]]] = {}  # per model class


def clean_fields(row: Notification, exclude: Collection[str] | None = None) -> None:
    """As `Model.clean_fields(exclude)`: a ValidationError naming each refused field, and
    each field's value as `field.clean` returns it."""
    exclude = exclude or ()
    errors: dict[str, Any] = {}
    for field, look in _all_looks(type(row)):
        if field.name in exclude:
            continue
        raw = getattr(row, field.attname)
        if field.blank and raw in field.empty_values:  # as Django: blank values are not cleaned
            continue
        if look(raw):
            continue
        try:
            setattr(row, field.attname, field.clean(raw, row))
        except ValidationError as exc:
            errors[field.name] = exc.error_list
    if errors:
        raise ValidationError(errors)


def _all_looks(model: type[Notification]) -> list[tuple[Field[Any, Any], Look]]:
    """Each field of the row's model with its look, worked out once per model."""
    found = _looks.get(model)
    if found is None:
        found = _looks[model] = [(f, _look(f)) for f in model._meta.fields if not getattr(f, "generated", False)]
    return found


def _never(value: Any) -> bool:
    return False


def _look(field: Field[Any, Any]) -> Look:
    """When `field.clean(value)` is known to return `value` and raise nothing."""
    blank, null = field.blank, field.null
    kinds = {type(v) for v in field.validators}
    if isinstance(field, models.URLField):
        return _url_look(field)
    if isinstance(field, models.CharField | models.TextField):
        if kinds - {MaxLengthValidator}:
            return _never
        limit = field.max_length or 0
        choices = {key for key, _ in field.flatchoices} if field.choices else None
        return lambda v: (  # a str subclass (a TextChoices member) is returned as it is too
            isinstance(v, str)
            and (not limit or len(v) <= limit)
            and (blank or v != "")
            and (choices is None or v == "" or v in choices)
        )
    if isinstance(field, models.JSONField):
        if field.encoder is not None or field.validators:
            return _never
        return lambda v: (v is not None or null) and (blank or v not in field.empty_values) and _encodes(v)
    if isinstance(field, models.DateTimeField):
        return lambda v: type(v) is datetime or (v is None and null)
    if isinstance(field, models.UUIDField):
        return lambda v: isinstance(v, uuid.UUID) or (v is None and null)
    if isinstance(field, models.IntegerField) and not field.choices:
        low, high = _range(field)
        if low is None and high is None and field.validators:
            return _never
        return lambda v: (
            (type(v) is int and (low is None or v >= low) and (high is None or v <= high)) or (v is None and null)
        )
    return _never


def _range(field: Field[Any, Any]) -> tuple[Any, Any]:
    low = high = None
    for validator in field.validators:
        if type(validator) is MinValueValidator and not callable(validator.limit_value):
            low = validator.limit_value if low is None else max(low, validator.limit_value)
        elif type(validator) is MaxValueValidator and not callable(validator.limit_value):
            high = validator.limit_value if high is None else min(high, validator.limit_value)
        else:
            return None, None
    return low, high


def _encodes(value: Any) -> bool:
    """Whether `json.dumps(value)` succeeds (Django's JSONField check): a string or an empty
    container at once, anything else as `validation.compact_json` encodes it (once a batch)."""
    if type(value) is str or not value:
        return True
    return validation.compact_json(value) is not None


def _url_look(field: Field[Any, Any]) -> Look:
    """A URL passes Django's URLValidator and length once per value within `validation.batch()`."""
    limit = field.max_length or 0
    blank = field.blank

    def validators_pass(value: str) -> list[str]:
        try:
            field.run_validators(value)
        except ValidationError:
            return ["refused"]
        return []

    return lambda v: (
        type(v) is str
        and (not limit or len(v) <= limit)
        and (blank or v != "")
        and not validation.remembered("url_validators", v, validators_pass)
    )
