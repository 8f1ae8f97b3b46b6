"""The Notifications list's filters: by state (the contract's values), channel and recurrence."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from notifications.channels import registry
from notifications.models import (
    NotificationQuerySet,
    states,
)
from notifications.models.states import STATES, State

# The filter's values, in the order an operator triages them.
FILTER_STATES = list(STATES)


class StateFilter(admin.SimpleListFilter):
    """`?state=due|scheduled|retrying|partial|dead|parked|paused|expired`: public values
    (bookmarks, the README), keep them."""

    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [(s.value, str(s.label)) for s in FILTER_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in State.values:
            return cast(NotificationQuerySet, queryset).in_state(value)
        return queryset


class ChannelFilter(admin.SimpleListFilter):
    title = _("channel")
    parameter_name = "channel"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [(c, c) for c in registry.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None or not registry.known(value):
            return queryset
        return queryset.filter(states.sends_on(value))


class RecurrenceFilter(admin.SimpleListFilter):
    title = _("schedule")
    parameter_name = "schedule"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("one-shot", gettext("one-shot")), ("recurring", gettext("recurring"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "one-shot":
            return queryset.filter(recurrence_rule="")
        if self.value() == "recurring":
            return queryset.exclude(recurrence_rule="")
        return queryset
