"""Admin: the HTTP API's tokens, listed and revoked. Never a secret: only the token's hash
is stored, and the list does not show even that. Tokens are made by
`manage.py notifications_token create` (it prints the token once)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from notifications.admin.base import ModelAdmin
from notifications.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(ModelAdmin):
    list_display = ["name", "scope_list", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name"]
    fields = ["name", "scopes", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["name", "scopes", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.scopes)

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at=None).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s): they are refused from now on.")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by the command, which shows the token once

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request)  # the action; no edits
