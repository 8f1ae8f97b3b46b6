"""The delivery history (`DeliveryAttempt`) and the tick runs (`TickRun`): read-only lists."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from notifications import services
from notifications.admin import charts, display
from notifications.admin.base import ReadOnlyModelAdmin
from notifications.admin.display import moment
from notifications.admin.status import abbreviate_error
from notifications.conf import app_settings
from notifications.models import (
    DeliveryAttempt,
    Notification,
    TickRun,
)


def retention_days() -> Any:
    return app_settings.ATTEMPT_RETENTION_DAYS


def kept_for() -> str:
    """`kept 30 days`: how long delivery history outlives its rows."""
    days = retention_days()
    return ngettext("kept %(days)s day", "kept %(days)s days", days if isinstance(days, int) else 2) % {"days": days}


class NotificationIdFilter(admin.SimpleListFilter):
    """`?notification_id=N`: one row's history (linked from its change page)."""

    title = _("notification")
    parameter_name = "notification_id"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        pk = row_id(self.value())
        return [] if pk is None else [(str(pk), f"#{pk}")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        pk = row_id(self.value())
        return queryset if pk is None else queryset.filter(notification_id=pk)


def row_id(value: str | None) -> int | None:
    """`value` as a row id the database can compare (ASCII digits, within a BIGINT), or None."""
    if not value or not (value.isascii() and value.isdigit()) or int(value) >= 2**63:
        return None
    return int(value)


def outcome_badge(attempt: DeliveryAttempt) -> SafeString:
    """`Delivered`, or `Failed` with its error class (`transient`: another attempt could help)."""
    badge = format_html('<span class="nq-outcome-{}">{}</span>', attempt.outcome, attempt.get_outcome_display())
    if attempt.outcome == DeliveryAttempt.AttemptOutcome.OK or not attempt.error_class:
        return badge
    return format_html('{} <span class="nq-quiet">{}</span>', badge, attempt.error_class)


def milliseconds(value: int) -> str:
    """`212 ms`, `1.25 s`."""
    return gettext("%(ms)d ms") % {"ms": value} if value < 1000 else gettext("%(s).2f s") % {"s": value / 1000}


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyModelAdmin):
    """The append-only delivery log: read-only, kept for NOTIFICATIONS_ATTEMPT_RETENTION_DAYS.

    The list fits 1366 px with the sidebar open: the error class rides with the outcome,
    the HTTP status is in the error text (and a filter away)."""

    list_display = [
        "attempted",
        "notification_link",
        "channel",
        "sent_to_line",
        "what",
        "outcome_badge",
        "error_text",
        "duration",
    ]
    list_filter = [NotificationIdFilter, "outcome", "channel", "error_class", "http_status", "attempted_at"]
    # The sent log: "did the reset mail to X go out?" outlives the row (deleted once delivered).
    search_fields = ["sent_to", "recipient", "summary", "error"]
    search_help_text = _(
        "Search by who it was sent to (an address, a webhook's host), recipient id, subject or event, or error."
    )
    date_hierarchy = "attempted_at"
    list_per_page = 100
    readonly_fields = (
        "attempted",
        "notification_link",
        "firing_id",
        "channel",
        "sent_to",
        "recipient",
        "summary",
        "outcome_badge",
        "error",
        "error_class",
        "http_status",
        "duration",
    )
    fields = readonly_fields

    Media = display.Styles

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeliveryAttempt]:
        # One EXISTS per page, not one query per row, tells a purged row's history apart.
        alive = Notification.objects.filter(pk=OuterRef("notification_id"))
        return cast(QuerySet[DeliveryAttempt], super().get_queryset(request).annotate(row_exists=Exists(alive)))

    @admin.display(description=_("attempted"), ordering="attempted_at")
    def attempted(self, obj: DeliveryAttempt) -> SafeString | None:
        return moment(obj.attempted_at)

    @admin.display(description=_("row"), ordering="notification_id")
    def notification_link(self, obj: DeliveryAttempt) -> SafeString:
        if not getattr(obj, "row_exists", False):
            return format_html(
                '<del title="{}">#{}</del>',
                gettext("Gone: purged, cancelled, or a one-shot row deleted once delivered."),
                obj.notification_id,
            )
        url = reverse("admin:notifications_notification_change", args=[obj.notification_id])
        return format_html('<a href="{}">#{}</a>', url, obj.notification_id)

    @admin.display(description=_("sent to"), ordering="sent_to")
    def sent_to_line(self, obj: DeliveryAttempt) -> SafeString | None:
        return display.clip(obj.sent_to) if obj.sent_to else None

    @admin.display(description=_("subject or event"), ordering="summary")
    def what(self, obj: DeliveryAttempt) -> SafeString | None:
        return display.clip(obj.summary) if obj.summary else None

    @admin.display(description=_("outcome"), ordering="outcome")
    def outcome_badge(self, obj: DeliveryAttempt) -> SafeString:
        return outcome_badge(obj)

    @admin.display(description=_("error"))
    def error_text(self, obj: DeliveryAttempt) -> SafeString | None:
        return abbreviate_error(obj.error)

    @admin.display(description=_("duration"), ordering="duration_ms")
    def duration(self, obj: DeliveryAttempt) -> str:
        return milliseconds(obj.duration_ms)


class TickActivityFilter(admin.SimpleListFilter):
    """`?activity=busy`: the ticks that claimed something (hides "nothing due"); `idle`: the others."""

    title = _("activity")
    parameter_name = "activity"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("busy", gettext("claimed rows")), ("idle", gettext("nothing due"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "busy":
            return queryset.filter(claimed__gt=0)
        if self.value() == "idle":
            return queryset.filter(claimed=0)
        return queryset


@admin.register(TickRun)
class TickRunAdmin(ReadOnlyModelAdmin):
    """Recent ticks: when, where, and what each did. Read-only.

    The list fits 1366 px with the sidebar open: what a tick did is one column of the
    summary line's counts, the ones that are not zero; its batches are on its own page.
    Above it, the recent ticks' durations and rows claimed (one query)."""

    change_list_template = "notifications/admin/tickrun_change_list.html"
    list_display = ["finished", "host_pid", "took", "claimed", "outcomes"]
    list_filter = [TickActivityFilter, "host"]
    date_hierarchy = "finished_at"
    fields = ("started", "finished", "host", "pid", "clock_offset", "took", "batches", "claimed", "outcomes")
    readonly_fields = fields
    Media = display.Styles

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        busy = request.GET.get("activity") == "busy"
        title = gettext("The last %(count)d ticks that claimed rows") if busy else gettext("The last %(count)d ticks")
        picture = charts.panel(title % {"count": charts.TICKS_SHOWN}, charts.recent_ticks(busy_only=busy))
        return super().changelist_view(request, extra_context={"tick_charts": picture, **(extra_context or {})})

    @admin.display(description=_("finished"), ordering="finished_at")
    def finished(self, obj: TickRun) -> SafeString | None:
        return moment(obj.finished_at)

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, obj: TickRun) -> SafeString | None:
        return moment(obj.started_at)

    @admin.display(description=_("host"), ordering="host")
    def host_pid(self, obj: TickRun) -> SafeString:
        return display.clip(gettext("%(host)s, pid %(pid)s") % {"host": obj.host, "pid": obj.pid})

    @admin.display(description=_("took"))
    def took(self, obj: TickRun) -> str:
        return gettext("%(s).2f s") % {"s": (obj.finished_at - obj.started_at).total_seconds()}

    @admin.display(description=_("outcomes"))
    def outcomes(self, obj: TickRun) -> SafeString | str:
        counts = [f"{name}={getattr(obj, name)}" for name in services.TICK_COUNTS[1:] if getattr(obj, name)]
        return display.clip(" ".join(counts)) if counts else gettext("nothing due")
