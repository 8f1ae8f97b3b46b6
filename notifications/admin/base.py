"""The base of the app's admin classes: Django's `ModelAdmin`, whose lists refuse query
values no database takes, as Django refuses a bad lookup (the "?e=1" page), not with a 500.

A staff user's hand-edited URL (`?outcome=%00`, `?next_fire_at__year=99999999999`) would
otherwise reach the database: PostgreSQL refuses NUL bytes in text, and a year past 9999
overflows Python's dates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.http import HttpRequest

if TYPE_CHECKING:  # django-stubs makes the admin classes generic; at run time they are not
    DjangoModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[Any, Any]
else:
    DjangoModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline

DATE_PARTS = ("__year", "__month", "__day")  # the date hierarchy's parameters


def refusal(name: str, value: str) -> str | None:
    """Why a list's query parameter `name=value` cannot reach the database, or None."""
    if "\x00" in name or "\x00" in value:
        return "a NUL byte"
    if name.endswith(DATE_PARTS) and not (value.isascii() and value.isdigit() and len(value) <= 4):
        return f"{name} is not a date part"
    return None


class ModelAdmin(DjangoModelAdmin):
    def get_changelist_instance(self, request: HttpRequest) -> Any:
        for name, values in request.GET.lists():
            for value in values:
                why = refusal(name, value)
                if why:
                    raise IncorrectLookupParameters(why)
        return super().get_changelist_instance(request)
