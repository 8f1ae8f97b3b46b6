"""Model fields of the app's own."""

from __future__ import annotations

from typing import Any

from django.db import models


class HttpsURLField(models.URLField):  # type: ignore[type-arg]
    """A URLField whose form field reads a URL typed without a scheme as https.

    That is Django 6's default; choosing it here spares every form of the model (the
    admin's, a host site's ModelForm) Django 5.2's RemovedInDjango60Warning. Migrations
    see a plain URLField.
    """

    def formfield(self, **kwargs: Any) -> Any:  # type: ignore[override]  # the stubs name two of the kwargs
        return super().formfield(**{"assume_scheme": "https", **kwargs})

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.URLField", args, kwargs
