"""The operator's console: the queue, its states, requeue and purge."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import ngettext

from . import services
from .models import DeliveryAttempt, Notification, State


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(s.value, s.label) for s in State if s != State.PARKED] + [(State.PARKED.value, State.PARKED.label)]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.in_state(self.value())
        return queryset


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = ["attempted_at", "channel", "outcome", "error", "error_class", "http_status", "duration_ms"]
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False
    ordering = ["-attempted_at", "-id"]

    def get_queryset(self, request):
        return super().get_queryset(request).order_by("-attempted_at", "-id")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "channels",
        "target",
        "schedule",
        "next_fire_at",
        "state_label",
        "error_count",
        "short_error",
        "last_fired_at",
    ]
    list_filter = [StateFilter]
    search_fields = ["email_to", "webhook_url", "last_error"]
    date_hierarchy = "next_fire_at"
    actions = ["requeue", "purge"]
    readonly_fields = ["last_fired_at", "error_count", "last_error", "dead_lettered_at", "created_at", "updated_at"]
    inlines = [AttemptInline]

    @admin.display(description="target")
    def target(self, obj: Notification) -> str:
        from urllib.parse import urlsplit

        parts = []
        if obj.email_to:
            parts.append(obj.email_to)
        if obj.webhook_url:
            parts.append(urlsplit(obj.webhook_url).hostname or "")
        return ", ".join(parts)

    @admin.display(description="schedule")
    def schedule(self, obj: Notification) -> str:
        return f"{obj.recurrence_rule} ({obj.timezone})" if obj.recurrence_rule else "one-shot"

    @admin.display(description="state")
    def state_label(self, obj: Notification) -> str:
        return obj.state().label

    @admin.display(description="last error")
    def short_error(self, obj: Notification) -> str:
        error = obj.last_error or ""
        return error if len(error) <= 80 else error[:79] + "…"

    @admin.action(description="Requeue selected dead letters and partial failures", permissions=["change"])
    def requeue(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = services.requeue(queryset)
        self.message_user(
            request,
            ngettext("Requeued %d notification.", "Requeued %d notifications.", result.changed) % result.changed,
            messages.SUCCESS if result.changed else messages.WARNING,
        )
        for reason, count in result.skipped.items():
            self.message_user(request, f"Skipped {count}: {reason}.", messages.WARNING)

    @admin.action(description="Purge selected notifications", permissions=["delete"])
    def purge(self, request: HttpRequest, queryset: QuerySet):
        if request.POST.get("post"):
            deleted = services.purge(queryset)
            self.message_user(
                request, ngettext("Purged %d notification.", "Purged %d notifications.", deleted) % deleted
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Purge notifications?",
            "queryset": queryset,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        return TemplateResponse(request, "notifications/admin/purge_confirmation.html", context)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(admin.ModelAdmin):
    list_display = [
        "attempted_at",
        "notification_id",
        "channel",
        "outcome",
        "error",
        "error_class",
        "http_status",
        "duration_ms",
    ]
    list_filter = ["outcome", "channel", "error_class"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
