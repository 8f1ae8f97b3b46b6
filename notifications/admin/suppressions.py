"""Admin: the suppression list. Deleting an entry lifts it; the next firing sends to it again."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from notifications.admin.base import ModelAdmin
from notifications.admin.display import Styles, clip, moment
from notifications.models import Suppression


@admin.register(Suppression)
class SuppressionAdmin(ModelAdmin):
    """Addresses email is not sent to: refused for good by a mail server or provider,
    bounced or complained about (django-anymail's tracking), or added by hand."""

    list_display = ["address", "short_reason", "created"]
    search_fields = ["address", "reason"]
    date_hierarchy = "created_at"
    list_per_page = 100
    fields = ["address", "reason", "created"]
    readonly_fields = ["created"]

    Media = Styles

    @admin.display(description=_("reason"), ordering="reason")
    def short_reason(self, obj: Suppression) -> SafeString | None:
        return clip(obj.reason) if obj.reason else None

    @admin.display(description=_("added"), ordering="created_at")
    def created(self, obj: Suppression) -> SafeString | None:
        return moment(obj.created_at)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # An entry is about one address: lift it (delete) rather than point it elsewhere.
        return ["address", *self.readonly_fields] if obj is not None else list(self.readonly_fields)
