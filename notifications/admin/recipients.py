"""Admin: recipients' preferences, and erasing a person (`notifications.api.erase`).

The erase action is offered on the Preferences list and on the Notifications list: the
people of the selected rows (their `recipient`; for a row without one, its first address)
are shown on a confirmation page with what goes, then erased. It needs the delete
permission of both preferences and notifications: a view-only operator cannot erase.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from notifications.admin.base import ModelAdmin
from notifications.conf import categories
from notifications.models import Preference
from notifications.models.addresses import as_list, bare
from notifications.services import erasure

ERASE_SHOWN = 50  # people a confirmation page lists at most (and erases at once)


def people_of(queryset: QuerySet[Any]) -> list[erasure.Person]:
    """The distinct people of the selected preferences or notifications."""
    found: dict[tuple[str, str], erasure.Person] = {}
    if queryset.model is Preference:
        for recipient in queryset.order_by().values_list("recipient", flat=True).distinct()[: ERASE_SHOWN + 1]:
            who = erasure.Person(recipient, recipient if "@" in recipient else "")
            found[(who.recipient, who.address)] = who
    else:
        for recipient, to in queryset.order_by().values_list("recipient", "email_to")[: ERASE_SHOWN * 10]:
            first = next(iter(as_list(to)), "")
            who = erasure.Person(recipient, "" if recipient or not first else bare(first))
            if who.keys:
                found[(who.recipient, who.address)] = who
    return list(found.values())


@admin.action(permissions=["erase"], description=_("Erase the selected people (rows, history, preferences)"))
def erase_recipients(modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]) -> Any:
    people = people_of(queryset)
    if not people:
        modeladmin.message_user(request, _("The selection names nobody to erase (no recipient, no address)."))
        return None
    if len(people) > ERASE_SHOWN:
        modeladmin.message_user(
            request, _("Select at most %(n)d people to erase at once.") % {"n": ERASE_SHOWN}, messages.WARNING
        )
        return None
    if request.POST.get("post"):
        totals: dict[str, int] = {}
        for who in people:
            for name, count in erasure.erase(who.recipient, who.address).items():
                totals[name] = totals.get(name, 0) + count
        done = ngettext("Erased %(count)d person", "Erased %(count)d people", len(people)) % {"count": len(people)}
        details = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in totals.items() if count)
        modeladmin.message_user(request, f"{done}: {details or 'nothing was left'}.", messages.SUCCESS)
        return None
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": ngettext("Erase %(count)d person?", "Erase %(count)d people?", len(people)) % {"count": len(people)},
        "opts": opts,
        "people": [{"who": who, "counts": erasure.describe(who)} for who in people],
        "posted": list(queryset.values_list("pk", flat=True)[: ERASE_SHOWN * 10]),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "notifications/admin/erase_confirmation.html", context)


def can_erase(request: HttpRequest) -> bool:
    """Deleting preferences and notifications both: erasure removes both."""
    return request.user.has_perms(["notifications.delete_preference", "notifications.delete_notification"])


class CategoryFilter(admin.SimpleListFilter):
    """By category, as NOTIFICATIONS_CATEGORIES names them (no query for the choices)."""

    title = _("category")
    parameter_name = "category"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, category.label) for key, category in categories().items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(category=value) if value else queryset


@admin.register(Preference)
class PreferenceAdmin(ModelAdmin):
    """What recipients chose: a category on a channel (blank: every channel) on or off."""

    list_display = ["recipient", "category", "channel_shown", "enabled", "updated_at"]
    list_filter = [CategoryFilter, "channel", "enabled"]
    search_fields = ["recipient"]
    list_per_page = 100
    fields = ["recipient", "category", "channel", "enabled", "updated_at"]
    readonly_fields = ["updated_at"]
    actions = [erase_recipients]

    @admin.display(description=_("channel"), ordering="channel")
    def channel_shown(self, obj: Preference) -> str:
        return obj.channel or str(_("every channel"))

    def has_erase_permission(self, request: HttpRequest) -> bool:
        return can_erase(request)
