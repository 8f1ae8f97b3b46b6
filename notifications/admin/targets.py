"""Admin: the Targets list, one row per target with a circuit breaker on record.

It shows each target's state, failure streak, a sparkline of its failures per hour over
24 hours, last error, the rows its open circuit holds and when it last changed;
`close_circuit` releases a target now (its held rows are due at once), `open_circuit`
holds one by hand until it is closed again. Both need the change permission. Targets are made by the tick, not by hand.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import ngettext

from notifications.admin import charts, display
from notifications.admin.base import ModelAdmin
from notifications.flow import breaker as circuit
from notifications.models import Notification, Target


class TargetChangeList(ChangeList):
    """The Targets list: each listed target carries its failures per hour over 24 hours,
    read for the whole page in one query (`charts.failures_by_target`)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        found = charts.failures_by_target(target.key for target in self.result_list)
        for target in self.result_list:
            target.failure_series = found.get(target.key)


@admin.register(Target)
class TargetAdmin(ModelAdmin):
    """Endpoint health: where deliveries fail, what is held, and the switch for it."""

    list_display = [
        "key",
        "state",
        "failures_shown",
        "failures_24h",
        "last_error_short",
        "rows_waiting",
        "retry",
        "changed",
    ]
    list_filter = ["state"]
    search_fields = ["key"]
    ordering = ["state", "key"]
    actions = ["close_circuit", "open_circuit"]
    readonly_fields = [f.name for f in Target._meta.fields]
    Media = display.Styles

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TargetChangeList

    @admin.display(description="failures, 24 h")
    def failures_24h(self, obj: Target) -> SafeString | None:
        series = getattr(obj, "failure_series", None)
        return charts.sparkline(series) if series is not None else None

    def get_queryset(self, request: HttpRequest) -> QuerySet[Target]:
        held = Notification.objects.filter(held_for=OuterRef("key")).order_by().values("held_for")
        waiting = Subquery(held.annotate(n=Count("pk")).values("n"))  # over the held-rows index
        queryset: QuerySet[Target] = super().get_queryset(request)
        return queryset.annotate(waiting=Coalesce(waiting, 0))

    @admin.display(description="failure streak", ordering="failures")
    def failures_shown(self, obj: Target) -> int:
        return obj.failures

    @admin.display(description="last error")
    def last_error_short(self, obj: Target) -> SafeString | None:
        return display.clip(obj.last_error) if obj.last_error else None

    @admin.display(description="probe at", ordering="retry_at")
    def retry(self, obj: Target) -> SafeString | None:
        return display.moment(obj.retry_at)

    @admin.display(description="changed", ordering="updated_at")
    def changed(self, obj: Target) -> SafeString | None:
        return display.moment(obj.updated_at)

    @admin.display(description="rows waiting", ordering="waiting")
    def rows_waiting(self, obj: Target) -> int:
        return int(getattr(obj, "waiting", 0))

    @admin.action(description="Close the circuit (release held rows now)", permissions=["change"])
    def close_circuit(self, request: HttpRequest, queryset: QuerySet[Target]) -> None:
        closed = sum(circuit.close(target.key) for target in queryset)
        self.message_user(
            request, ngettext("%d circuit closed.", "%d circuits closed.", closed) % closed, messages.SUCCESS
        )

    @admin.action(description="Open the circuit (hold rows until closed by hand)", permissions=["change"])
    def open_circuit(self, request: HttpRequest, queryset: QuerySet[Target]) -> None:
        opened = sum(circuit.open_by_hand(target.key) for target in queryset)
        self.message_user(
            request, ngettext("%d circuit opened.", "%d circuits opened.", opened) % opened, messages.SUCCESS
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
