"""The operator's console: the queue by state, why rows failed, requeue and purge.

Every state change goes through `notifications.services`, the module the tick uses too:
actions, and the add and change pages' saves. States are `notifications.states`.
The changelist costs a fixed number of queries whatever the page size: the columns read
only the row itself, and the health header is two aggregate queries.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import ngettext

from . import addresses, schedule, services, validation
from .admin_forms import SECRET_FIELD, NotificationForm
from .conf import app_settings
from .health import queue_health
from .models import DeliveryAttempt, Notification, NotificationQuerySet, TickRun
from .states import STATES, State

if TYPE_CHECKING:  # django-stubs makes the admin classes generic; at run time they are not
    ModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[Any, Any]
else:
    ModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline
from .validation import CHANNELS

ATTEMPTS_SHOWN = 20  # delivery attempts on a change page; the rest are one click away
UPCOMING_SHOWN = 5
ERROR_SHOWN = 80  # characters of last_error in the list

# The columns the changelist (and its actions' confirmation pages) read: the payload and
# the body, which can be large, are never loaded for a list.
LIST_COLUMNS = (
    "id",
    "channels",
    "email_to",
    "webhook_url",
    "recurrence_rule",
    "timezone",
    "next_fire_at",
    "last_fired_at",
    "error_count",
    "last_error",
    "failed_channels",
    "dead_lettered_at",
    "paused_at",
    "expired_at",
)

# The filter's values, in the order an operator triages them.
FILTER_STATES = list(STATES)


class StateFilter(admin.SimpleListFilter):
    """`?state=due|scheduled|retrying|partial|dead|parked|paused|expired`: public values
    (bookmarks, the README), keep them."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [(s.value, s.label) for s in FILTER_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in State.values:
            return cast(NotificationQuerySet, queryset).in_state(value)
        return queryset


class ChannelFilter(admin.SimpleListFilter):
    title = "channel"
    parameter_name = "channel"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [(c, c) for c in CHANNELS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value not in CHANNELS:
            return queryset
        # JSON list positions rather than `contains`, which SQLite lacks.
        match = Q()
        for position in range(len(CHANNELS)):
            match |= Q(**{f"channels__{position}": value})
        return queryset.filter(match)


class RecurrenceFilter(admin.SimpleListFilter):
    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("one-shot", "one-shot"), ("recurring", "recurring")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "one-shot":
            return queryset.filter(recurrence_rule="")
        if self.value() == "recurring":
            return queryset.exclude(recurrence_rule="")
        return queryset


def state_badge(state: State) -> str:
    return format_html('<span class="nq-state nq-state-{}">{}</span>', state.value, state.label)


def abbreviate_error(error: str | None) -> str:
    """An error for a list column: up to ERROR_SHOWN characters, the whole text on hover."""
    if not error:
        return "—"
    if len(error) <= ERROR_SHOWN:
        return error
    return format_html('<span title="{}">{}…</span>', error, error[: ERROR_SHOWN - 1])


def when(moment: datetime | None, zone: str | None = None) -> str:
    """`2026-03-29 09:00 CEST (+0200)` in `zone`, or in UTC."""
    if moment is None:
        return "—"
    local = moment.astimezone(schedule.get_zone(zone) if zone else UTC)
    return local.strftime("%Y-%m-%d %H:%M %Z (%z)")


class AttemptInline(TabularInline):
    """The row's latest delivery attempts, newest first; read-only and bounded."""

    model = DeliveryAttempt
    verbose_name_plural = f"recent delivery attempts (latest {ATTEMPTS_SHOWN}, newest first)"
    readonly_fields = (
        "attempted_at",
        "channel",
        "outcome",
        "error",
        "error_class",
        "http_status",
        "duration_ms",
        "firing_id",
    )
    fields = readonly_fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NotificationChangeList(ChangeList):
    """The changelist, reading only `LIST_COLUMNS` (so are the rows its actions get)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).only(*LIST_COLUMNS)


@admin.register(Notification)
class NotificationAdmin(ModelAdmin):
    form = NotificationForm
    change_list_template = "notifications/admin/notification_change_list.html"
    list_display = [
        "id",
        "channel_names",
        "target",
        "schedule",
        "next_fire_at",
        "state_column",
        "error_count",
        "short_error",
        "last_fired_at",
    ]
    list_display_links = ["id"]
    list_filter = [StateFilter, ChannelFilter, RecurrenceFilter]
    search_fields = ["key", "email_to", "webhook_url", "last_error"]
    date_hierarchy = "next_fire_at"
    list_per_page = 100
    show_full_result_count = False  # a second COUNT(*) per page; the health header has the totals
    actions = ["requeue", "run_now", "pause", "resume", "purge"]
    change_form_template = "notifications/admin/notification_change_form.html"
    inlines = [AttemptInline]
    readonly_fields = [
        "key",
        "paused_at",
        "state_column",
        "upcoming",
        "owed",
        "error_count",
        "full_error",
        "last_fired_at",
        "dead_lettered_at",
        "claim",
        "firing_id",
        "history",
        "created_at",
        "updated_at",
        "secret_status",
    ]
    fieldsets = [
        (
            "Status",
            {
                "fields": [
                    "key",
                    "state_column",
                    "error_count",
                    "full_error",
                    "owed",
                    "last_fired_at",
                    "dead_lettered_at",
                    "paused_at",
                ]
            },
        ),
        ("Schedule", {"fields": ["recurrence_rule", "timezone", "next_fire_at", "upcoming"]}),
        ("Limits", {"fields": ["expires_at", "max_delay", "quiet_hours", "max_retries", "backoff"]}),
        (
            "Email",
            {
                "fields": [
                    "email_to",
                    "email_cc",
                    "email_bcc",
                    "reply_to",
                    "subject",
                    "body",
                    "html_body",
                    "template",
                    "language",
                ]
            },
        ),
        ("Webhook", {"fields": ["webhook_url", "secret_status", "webhook_secret", "clear_webhook_secret"]}),
        ("Delivery", {"fields": ["channels", "payload", "firing_id", "claim", "history", "created_at", "updated_at"]}),
    ]
    add_fieldsets = [
        (None, {"fields": ["channels", "email_to", "subject", "body", "webhook_url", "webhook_secret", "payload"]}),
        ("Schedule", {"fields": ["recurrence_rule", "timezone", "next_fire_at"]}),
    ]

    # --- columns ---------------------------------------------------------------------

    class Media:
        css = {"all": ["notifications/admin.css"]}

    @admin.display(description="channels")
    def channel_names(self, obj: Notification) -> str:
        return ", ".join(str(c) for c in obj.channel_list) or "—"

    @admin.display(description="target")
    def target(self, obj: Notification) -> str:
        """Recipient and webhook host: never the URL's path or query, never a secret."""
        parts = []
        if obj.email_to:
            parts.append(addresses.compact(obj.email_to))  # ada@example.com +2
        if obj.webhook_url:
            try:
                parts.append(urlsplit(obj.webhook_url).hostname or "?")
            except ValueError:
                parts.append("?")
        return ", ".join(parts) or "—"

    @admin.display(description="schedule")
    def schedule(self, obj: Notification) -> str:
        return f"{obj.recurrence_rule} ({obj.timezone})" if obj.recurrence_rule else "one-shot"

    @admin.display(description="state")
    def state_column(self, obj: Notification) -> str:
        return state_badge(obj.state())

    @admin.display(description="last error")
    def short_error(self, obj: Notification) -> str:
        return abbreviate_error(obj.last_error)

    # --- change page -----------------------------------------------------------------

    @admin.display(description="last error")
    def full_error(self, obj: Notification) -> str:
        return format_html("<code>{}</code>", obj.last_error) if obj.last_error else "—"

    @admin.display(description="channels still owed")
    def owed(self, obj: Notification) -> str:
        if obj.resend_channels:
            return f"{', '.join(obj.resend_channels)} (failed; a requeue sends only these)"
        return ", ".join(obj.owed_channels) or "—"

    @admin.display(description="claimed by a tick until")
    def claim(self, obj: Notification) -> str:
        if obj.claimed_until and obj.claimed_until > timezone.now():
            return when(obj.claimed_until)
        return "not claimed"

    @admin.display(description=f"next {UPCOMING_SHOWN} occurrences")
    def upcoming(self, obj: Notification) -> str:
        """The rule's next firings, in the row's zone and in UTC (DST shows in the offset)."""
        if not obj.recurrence_rule:
            return "one-shot: fires once, at the due time"
        now = timezone.now()
        try:
            times = schedule.upcoming(
                obj.recurrence_rule, obj.timezone, now, UPCOMING_SHOWN, anchor=obj.recurrence_anchor
            )
        except schedule.InvalidRule as exc:
            return f"cannot compute: {exc}"
        if not times:
            return "none: the rule has no occurrence left"
        rows = format_html_join(
            "", "<tr><td>{}</td><td>{}</td></tr>", ((when(t, obj.timezone), when(t)) for t in times)
        )
        return format_html(
            '<table class="nq-upcoming"><thead><tr><th>{}</th><th>UTC</th></tr></thead><tbody>{}</tbody></table>',
            obj.timezone,
            rows,
        )

    @admin.display(description="webhook secret")
    def secret_status(self, obj: Notification) -> str:
        """Whether the row signs with a secret of its own; the value itself is never shown."""
        return "set" if obj.webhook_secret else "not set"

    @admin.display(description="delivery history")
    def history(self, obj: Notification) -> str:
        if obj.pk is None:
            return "—"
        url = reverse("admin:notifications_deliveryattempt_changelist") + f"?notification_id={obj.pk}"
        count = DeliveryAttempt.objects.filter(notification_id=obj.pk).count()
        return format_html('<a href="{}">all {} attempts</a> (kept {} days)', url, count, retention_days())

    def get_fieldsets(self, request: HttpRequest, obj: Notification | None = None) -> list[Any]:
        if obj is None:
            return self.add_fieldsets
        hidden: set[str] = set()
        if not self.has_change_permission(request, obj):
            # Without the change permission Django renders every listed field read-only,
            # as its stored value: the secret's inputs must not be listed at all.
            # `secret_status` tells everyone whether one is set.
            hidden |= {SECRET_FIELD, "clear_webhook_secret"}
        if not obj.webhook_secret:
            # The "remove" box exists only while the row has a secret of its own.
            hidden.add("clear_webhook_secret")
        return [
            (name, {**opts, "fields": [f for f in opts["fields"] if f not in hidden]}) for name, opts in self.fieldsets
        ]

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Notification | None:
        """The row; one whose payload cannot be decoded or shown opens with the payload blanked.

        Rows written by raw SQL can hold JSON nested past the decoder's recursion limit (or
        past what the page can render): the page then shows `null` for the payload, with a
        warning, so the operator can enter a new one or purge the row instead of getting a 500.
        """
        try:
            obj = cast(Notification | None, super().get_object(request, object_id, from_field))
        except RecursionError:
            obj = None
        if obj is not None and not validation.payload_too_deep(obj.payload):
            return obj
        queryset = self.get_queryset(request).defer("payload")
        field = queryset.model._meta.pk if from_field is None else queryset.model._meta.get_field(from_field)
        try:
            obj = cast(Notification, queryset.get(**{field.name: field.to_python(object_id)}))
        except (Notification.DoesNotExist, ValidationError, ValueError):
            return None
        obj.payload = None
        if request.method == "GET":
            self.message_user(
                request,
                "This row's stored payload cannot be shown: it is nested deeper than "
                f"{validation.MAX_PAYLOAD_DEPTH} levels or is not JSON the app can read, so the tick "
                "dead-letters it. It appears as null below: enter a new payload to repair the row, or purge it.",
                messages.WARNING,
            )
        return obj

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return NotificationChangeList

    def get_readonly_fields(self, request: HttpRequest, obj: Notification | None = None) -> list[str]:
        return self.readonly_fields if obj is not None else []

    def get_inline_instances(self, request: HttpRequest, obj: Notification | None = None) -> list[Any]:
        return super().get_inline_instances(request, obj) if obj is not None else []

    def get_formset_kwargs(self, request: HttpRequest, obj: Any, inline: Any, prefix: str) -> dict[str, Any]:
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, AttemptInline) and obj is not None and obj.pk is not None:
            latest = (
                DeliveryAttempt.objects.filter(notification_id=obj.pk)
                .order_by("-attempted_at", "-id")
                .values("pk")[:ATTEMPTS_SHOWN]
            )
            kwargs["queryset"] = kwargs["queryset"].filter(pk__in=latest).order_by("-attempted_at", "-id")
        return kwargs

    def save_model(self, request: HttpRequest, obj: Notification, form: NotificationForm, change: bool) -> None:
        # The form applied the due-time rule to check it; this saves it, at the same instant.
        services.edit(obj, form.cleaned_data, changed=form.changed_data, now=form.edited_at)

    def delete_model(self, request: HttpRequest, obj: Notification) -> None:
        services.purge([obj])  # the change page's Delete link: the one writer deletes

    # --- the change page's buttons: the list actions, on one row ---------------------

    def get_urls(self) -> list[URLPattern]:
        act = path(
            "<path:object_id>/act/<str:action>/",
            self.admin_site.admin_view(self.row_action_view),  # login, staff, CSRF
            name=f"{self.opts.app_label}_{self.opts.model_name}_act",
        )
        return [act, *super().get_urls()]

    def row_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponseBase:
        """A button of the change page: the list action `action` on this one row, POST only.

        The same permissions, messages and (for purge) confirmation page as the list: the
        confirmation posts back here.
        """
        if action not in ROW_ACTIONS:
            raise Http404(f"No action {action!r}.")
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        site = self.admin_site.name
        changelist = reverse(f"{site}:notifications_notification_changelist", current_app=site)
        obj = self.get_object(request, unquote(object_id))
        if obj is None:  # purged or delivered meanwhile
            self.message_user(request, f"Notification {unquote(object_id)} no longer exists.", messages.WARNING)
            return redirect(changelist)
        if not self.may(request, action, obj):
            raise PermissionDenied
        response = getattr(self, action)(request, self.get_queryset(request).filter(pk=obj.pk))
        if response is not None:
            return cast(HttpResponseBase, response)
        if not Notification.objects.filter(pk=obj.pk).exists():
            return redirect(changelist)
        return redirect(reverse(f"{site}:notifications_notification_change", args=[quote(obj.pk)], current_app=site))

    def may(self, request: HttpRequest, action: str, obj: Notification) -> bool:
        """Whether the user holds every permission the list action `action` needs."""
        needed = getattr(getattr(self, action), "allowed_permissions", ())
        return all(getattr(self, f"has_{name}_permission")(request, obj) for name in needed)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Notification | None = None,
    ) -> HttpResponse:
        if change and obj is not None and obj.pk is not None:
            now, site = timezone.now(), self.admin_site.name
            context["row_status"] = row_status(obj, now)
            context["row_actions"] = [
                {
                    "name": name,
                    "label": label,
                    "url": reverse(
                        f"{site}:notifications_notification_act", args=[quote(obj.pk), name], current_app=site
                    ),
                }
                for name, label in ROW_ACTIONS.items()
                if services.refusal(name, obj, now) is None and self.may(request, name, obj)
            ]
            context["action_checkbox_name"] = helpers.ACTION_CHECKBOX_NAME
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- changelist ------------------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        health = queue_health()
        base = reverse("admin:notifications_notification_changelist")
        states = [
            {"state": s, "label": s.label, "count": health.counts.get(s.value, 0), "url": f"{base}?state={s.value}"}
            for s in FILTER_STATES
        ]
        context = {"health": health, "health_states": states, **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes where the actions show (list or change form) and deprecates an
        # override without the parameter; 5.2 has none.
        base = super().get_actions
        actions = base(request) if action_location is None else base(request, action_location)  # type: ignore[call-arg]
        actions.pop("delete_selected", None)  # `purge` replaces it, with the queue's own confirmation
        return actions

    @admin.action(description="Requeue selected dead letters and partial failures", permissions=["change"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.requeue(queryset)
        done = ngettext("Requeued %d notification", "Requeued %d notifications", result.changed)
        resends = any(r.pending_channels for r in result.rows)
        note = " Partial failures resend only their failed channels." if resends else ""
        self.report(request, result, done, "Requeued: due now with a clean retry count.", note)

    @admin.action(description="Run selected notifications now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.RUN_NOW, queryset)
        done = ngettext("Made %d notification due now", "Made %d notifications due now", result.changed)
        note = " Recurring ones then continue their schedule." if any(r.is_recurring for r in result.rows) else ""
        self.report(request, result, done, "Run now: made due now.", note)

    @admin.action(description="Pause selected notifications", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.PAUSE, queryset)
        done = ngettext("Paused %d notification", "Paused %d notifications", result.changed)
        note = " Paused rows send nothing until resumed." if result.changed else ""
        self.report(request, result, done, "Paused.", note)

    @admin.action(description="Resume selected paused notifications", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.RESUME, queryset)
        done = ngettext("Resumed %d notification", "Resumed %d notifications", result.changed)
        note = (
            " Recurring ones continue at their next occurrence; missed occurrences are not sent."
            if any(r.is_recurring for r in result.rows)
            else ""
        )
        self.report(request, result, done, "Resumed.", note)

    def report(self, request: HttpRequest, result: services.ActionResult, done: str, logged: str, note: str) -> None:
        """Log the changed rows and tell the operator: `done` (with a `%d` for the count),
        what was skipped and why, then `note`."""
        if result.rows:
            LogEntry.objects.log_actions(
                user_id=cast(int, request.user.pk),  # the admin requires a logged-in user
                queryset=result.rows,
                action_flag=CHANGE,
                change_message=logged,
            )
        message = done % result.changed + skipped_text(result.skipped) + note
        level = messages.SUCCESS if result.changed and not result.skipped else messages.WARNING
        self.message_user(request, message, level)

    @admin.action(description="Purge selected notifications", permissions=["delete"])
    def purge(self, request: HttpRequest, queryset: QuerySet[Notification]) -> TemplateResponse | None:
        """Delete after a confirmation page, like Django's `delete_selected`."""
        if request.POST.get("post"):
            selected = list(queryset)
            self.log_deletions(request, selected)  # type: ignore[arg-type] # a list works: it is only iterated
            deleted = services.purge(selected)
            message = ngettext("Purged %d notification", "Purged %d notifications", deleted) % deleted
            gone = len(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)) - deleted
            message += skipped_text({"already gone": gone} if gone > 0 else {})
            message += f" Their delivery history stays readable for {retention_days()} days."
            self.message_user(request, message, messages.SUCCESS if deleted else messages.WARNING)
            return None
        rows = list(queryset)
        context = {
            **self.admin_site.each_context(request),
            "title": "Purge notifications?",
            "subtitle": None,
            "rows": [
                {"row": r, "state": state_badge(r.state()), "target": self.target(r), "schedule": self.schedule(r)}
                for r in rows
            ],
            "queryset": rows,
            "retention_days": retention_days(),
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "notifications/admin/purge_confirmation.html", context)


# The change page's buttons, in this order: each the list action of that name, shown to
# users who may run it, on rows it applies to (`services.refusal`).
ROW_ACTIONS = {"requeue": "Requeue", "run_now": "Run now", "pause": "Pause", "resume": "Resume", "purge": "Purge…"}


def row_status(row: Notification, now: datetime) -> str:
    """What happened to `row` and what comes next, in a sentence or two, for its change page."""
    state = row.state(now)
    error = format_html("<code>{}</code>", row.last_error) if row.last_error else "none recorded"
    upcoming = (
        "It does not fire again until requeued."
        if row.next_fire_at is None
        else format_html("Its schedule goes on: next firing {}.", when(row.next_fire_at))
    )
    if state == State.DEAD:
        return format_html(
            "<strong>Dead letter</strong> since {}: the firing was given up. Last error: {}. {}",
            when(row.dead_lettered_at),
            error,
            upcoming,
        )
    if state == State.EXPIRED:
        return format_html(
            "<strong>Expired</strong> at {}: the firing came too late and was not sent ({}). {}",
            when(row.expired_at),
            error,
            upcoming,
        )
    if state == State.PARTIAL:
        return format_html(
            "<strong>Partial failure</strong> at {}: {} did not go out. Last error: {}. "
            "A requeue sends only those again.",
            when(row.last_fired_at),
            ", ".join(row.resend_channels) or "no channel it still has",
            error,
        )
    return _healthy_status(row, state, error)


def _healthy_status(row: Notification, state: State, error: str) -> str:
    due = when(row.next_fire_at)
    if state == State.PAUSED:
        return format_html(
            "<strong>Paused</strong> since {}: nothing is sent until it is resumed.", when(row.paused_at)
        )
    if state == State.RETRYING:
        return format_html(
            "<strong>Retrying</strong> after {} failed attempt{}; next attempt {}. Last error: {}.",
            row.error_count,
            "" if row.error_count == 1 else "s",
            due,
            error,
        )
    if state == State.DUE:
        return format_html("<strong>Due</strong> since {}: the next tick sends it.", due)
    if state == State.SCHEDULED:
        return format_html("<strong>Scheduled</strong>: next firing {}.", due)
    return mark_safe("<strong>Parked</strong>: it has no due time and does not fire.")  # a constant


def skipped_text(skipped: dict[str, int]) -> str:
    """`; skipped 2: 1 still retrying on its own, 1 already gone.` or `.`"""
    total = sum(skipped.values())
    if not total:
        return "; skipped none."
    reasons = ", ".join(f"{count} {reason}" for reason, count in skipped.items())
    return f"; skipped {total}: {reasons}."


def retention_days() -> Any:
    return app_settings.ATTEMPT_RETENTION_DAYS


class NotificationIdFilter(admin.SimpleListFilter):
    """`?notification_id=N`: one row's history (linked from its change page)."""

    title = "notification"
    parameter_name = "notification_id"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"#{value}")] if value and value.isdigit() else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and value.isdigit():
            return queryset.filter(notification_id=int(value))
        return queryset


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ModelAdmin):
    """The append-only delivery log: read-only, kept for NOTIFICATIONS_ATTEMPT_RETENTION_DAYS."""

    list_display = [
        "attempted_at",
        "notification_link",
        "channel",
        "outcome_badge",
        "short_error",
        "error_class",
        "http_status",
        "duration_ms",
    ]
    list_filter = [NotificationIdFilter, "outcome", "channel", "error_class", "attempted_at"]
    search_fields = ["error"]
    date_hierarchy = "attempted_at"
    list_per_page = 100
    readonly_fields = (
        "attempted_at",
        "notification_link",
        "firing_id",
        "channel",
        "outcome_badge",
        "error",
        "error_class",
        "http_status",
        "duration_ms",
    )
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeliveryAttempt]:
        # One EXISTS per page, not one query per row, tells a purged row's history apart.
        alive = Notification.objects.filter(pk=OuterRef("notification_id"))
        return cast(QuerySet[DeliveryAttempt], super().get_queryset(request).annotate(row_exists=Exists(alive)))

    @admin.display(description="notification", ordering="notification_id")
    def notification_link(self, obj: DeliveryAttempt) -> str:
        if not getattr(obj, "row_exists", False):
            return f"#{obj.notification_id} (purged or delivered)"
        url = reverse("admin:notifications_notification_change", args=[obj.notification_id])
        return format_html('<a href="{}">#{}</a>', url, obj.notification_id)

    @admin.display(description="outcome", ordering="outcome")
    def outcome_badge(self, obj: DeliveryAttempt) -> str:
        return format_html('<span class="nq-outcome-{}">{}</span>', obj.outcome, obj.get_outcome_display())

    @admin.display(description="error")
    def short_error(self, obj: DeliveryAttempt) -> str:
        return abbreviate_error(obj.error)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # history is append-only; the tick prunes it past retention


@admin.register(TickRun)
class TickRunAdmin(ModelAdmin):
    """Recent ticks: when, where, and what each did. Read-only."""

    list_display = [
        "finished_at",
        "host",
        "pid",
        "seconds",
        "batches",
        "claimed",
        "succeeded",
        "partial",
        "retried",
        "dead_lettered",
        "released",
    ]
    list_filter = ["host"]
    date_hierarchy = "finished_at"

    @admin.display(description="seconds")
    def seconds(self, obj: TickRun) -> str:
        return f"{(obj.finished_at - obj.started_at).total_seconds():.2f}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


from .admin_targets import TargetAdmin  # noqa: E402, F401 - registers the Targets list
from .suppression_admin import SuppressionAdmin  # noqa: E402, F401 - registers the Suppressions list
