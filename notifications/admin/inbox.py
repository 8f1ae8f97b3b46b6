"""The inbox's messages (`InboxMessage`): a read-only list by recipient, category and state.

Marking is the person's (`notifications.inbox.mark`, the inbox page): an operator looks,
and erases a person through the Preferences list's action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from notifications.admin import display
from notifications.admin.base import ReadOnlyModelAdmin
from notifications.admin.display import moment
from notifications.models import InboxMessage

# state -> (what the operator reads, the messages in it). One state per message.
STATES: dict[str, tuple[Any, Q]] = {
    "unseen": (_("Unseen"), Q(archived_at__isnull=True, seen_at__isnull=True, read_at__isnull=True)),
    "seen": (_("Seen, not read"), Q(archived_at__isnull=True, seen_at__isnull=False, read_at__isnull=True)),
    "read": (_("Read"), Q(archived_at__isnull=True, read_at__isnull=False)),
    "archived": (_("Archived"), Q(archived_at__isnull=False)),
}


def state_of(message: InboxMessage) -> str:
    if message.archived_at is not None:
        return "archived"
    if message.read_at is not None:
        return "read"
    return "seen" if message.seen_at is not None else "unseen"


class StateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, Any]]:
        return [(key, label) for key, (label, _rows) in STATES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        found = STATES.get(self.value() or "")
        return queryset if found is None else queryset.filter(found[1])


@admin.register(InboxMessage)
class InboxMessageAdmin(ReadOnlyModelAdmin):
    """Read-only: messages are written by the tick and marked by their recipient."""

    list_display = ["created", "recipient", "category", "title", "state"]
    list_filter = [StateFilter, "category", "created_at"]
    # `=`: a recipient id matched whole, on the index that starts with it.
    search_fields = ["=recipient"]
    search_help_text = _("Search by recipient id (user:42), exactly.")
    date_hierarchy = "created_at"
    list_per_page = 100
    readonly_fields = (
        "id",
        "recipient",
        "category",
        "title",
        "body",
        "url",
        "data",
        "created_at",
        "seen_at",
        "read_at",
        "archived_at",
        "notification_id",
        "firing_id",
    )
    fields = readonly_fields

    Media = display.Styles

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: InboxMessage) -> SafeString | None:
        return moment(obj.created_at)

    @admin.display(description=_("state"))
    def state(self, obj: InboxMessage) -> Any:
        return STATES[state_of(obj)][0]
