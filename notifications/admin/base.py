"""The base of the app's admin classes: Django's `ModelAdmin`, whose lists filter only on
what their own filters offer and refuse query values no database takes, as Django
refuses a bad lookup (the "?e=1" page, or a 400), not with a 500.

A staff user's hand-edited URL would otherwise reach the database:
`?webhook_secret__startswith=whsec_A` answers yes or no, one character at a time, about a
secret no page shows; `?channels__contains=email` is a lookup SQLite lacks; PostgreSQL
refuses NUL bytes in text; a year past 9998 overflows Python's dates (the list asks for
the next year's first instant); a search of thousands of words or characters overflows
SQLite's expression depth and LIKE pattern.
"""

from __future__ import annotations

from datetime import MAXYEAR
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import SEARCH_VAR
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

if TYPE_CHECKING:  # django-stubs makes the admin classes generic; at run time they are not
    DjangoModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[Any, Any]
else:
    DjangoModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline

DATE_PARTS = ("__year", "__month", "__day")  # the date hierarchy's parameters
# A search is an operator's words or a pasted error, URL or address: well past any of
# those, and well inside SQLite's limits (expression depth 1,000, LIKE pattern 50,000 bytes).
MAX_SEARCH_WORDS = 100
MAX_SEARCH_CHARACTERS = 5_000


def refusal(name: str, value: str) -> str | None:
    """Why a list's query parameter `name=value` cannot reach the database, or None."""
    if "\x00" in name or "\x00" in value:
        return "a NUL byte"
    if name.endswith(DATE_PARTS):
        if not (value.isascii() and value.isdigit() and len(value) <= 4):
            return f"{name} is not a date part"
        if name.endswith("__year") and int(value) >= MAXYEAR:
            return f"{name}: the list reaches no further than {MAXYEAR - 1}"
    if name == SEARCH_VAR and (len(value) > MAX_SEARCH_CHARACTERS or len(value.split()) > MAX_SEARCH_WORDS):
        return f"a search of more than {MAX_SEARCH_WORDS} words or {MAX_SEARCH_CHARACTERS:,} characters"
    return None


def filter_names(list_filter: Any, date_hierarchy: str | None) -> set[str]:
    """The query parameters (before any `__lookup`) a list's own filters and date
    hierarchy use: a field name, or a `SimpleListFilter`'s `parameter_name`."""
    names = {date_hierarchy} if date_hierarchy else set()
    for item in list_filter:
        if isinstance(item, (list, tuple)):
            item = item[0]
        names.add(item if isinstance(item, str) else item.parameter_name)
    return {name.split(LOOKUP_SEP, 1)[0] for name in names}


class ModelAdmin(DjangoModelAdmin):
    def get_changelist_instance(self, request: HttpRequest) -> Any:
        for name, values in request.GET.lists():
            for value in values:
                why = refusal(name, value)
                if why:
                    raise IncorrectLookupParameters(why)
        return super().get_changelist_instance(request)

    def lookup_allowed(self, lookup: str, value: str, request: Any = None) -> bool:
        """Only the lookups of the list's own filters (Django allows any on a model's own
        fields): a refused one is a 400, as Django answers a forbidden relation lookup."""
        list_filter = self.get_list_filter(request) if request is not None else self.list_filter
        if lookup.split(LOOKUP_SEP, 1)[0] not in filter_names(list_filter, self.date_hierarchy):
            return False
        return bool(super().lookup_allowed(lookup, value, request))


class ReadOnlyModelAdmin(ModelAdmin):
    """A record the app writes and operators only read (the delivery log, tick records, inbox
    messages): no add, change or delete in the admin; the tick prunes them past retention."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
