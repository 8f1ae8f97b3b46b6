"""The operator's console: the queue by state, why rows failed, requeue and purge.

Every state change goes through `notifications.services`, the module the tick uses too:
actions, and the add and change pages' saves. States are `notifications.states`.
The changelist costs a fixed number of queries whatever the page size: the columns read
only the row itself, and the health header is two aggregate queries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Case, Exists, OuterRef, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from . import addresses, charts, display, partial_causes, schedule, services, states, validation
from .admin_base import ModelAdmin, TabularInline
from .admin_forms import SECRET_FIELD, NotificationForm
from .conf import app_settings, parse_secrets
from .display import moment
from .health import queue_health
from .models import DeliveryAttempt, Notification, NotificationQuerySet, TickRun
from .secrets import site_secret_problem
from .states import STATES, State
from .validation import CHANNELS

ATTEMPTS_SHOWN = 20  # delivery attempts on a change page; the rest are one click away
UPCOMING_SHOWN = 5

# The columns the changelist (and its actions' confirmation pages) read: the payload and
# the body, which can be large, are never loaded for a list, nor is a secret.
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
    "previous_error",
    "pending_channels",
    "failed_channels",
    "dead_lettered_at",
    "paused_at",
    "expired_at",
    "held_for",
)

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
        return [(c, c) for c in CHANNELS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value not in CHANNELS:
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


def state_badge(state: State) -> SafeString:
    return format_html('<span class="nq-state nq-state-{}">{}</span>', state.value, state.label)


def abbreviate_error(error: str | None) -> SafeString | None:
    """An error for a list column: one line cut to the column's width, the whole on hover.
    None (the admin's empty-value marker) when there is none."""
    return display.clip(error) if error else None


def when(value: datetime, zone: str | None = None) -> str:
    """The exact time, seconds included: `2026-03-29 09:00:00 CEST (+0200)` in `zone`
    (an IANA name), else in the current time zone."""
    return display.exact(value, schedule.get_zone(zone) if zone else None)


def signing_problem() -> str | None:
    """Why the site cannot sign webhooks right now (NOTIFICATIONS_WEBHOOK_SECRET), or None."""
    return site_secret_problem(parse_secrets(app_settings.WEBHOOK_SECRET))


def held(row: Notification) -> str | None:
    """Why the tick holds `row` for a setting (its webhook needs the site's signing secret,
    which has no usable key), or None. A list's rows carry `signs_itself` instead of the
    secret (`NotificationChangeList`)."""
    problem = signing_problem()
    if problem is None or row.next_fire_at is None or row.paused_at is not None:
        return None
    own = getattr(row, "signs_itself", None)
    return problem if services.unsigned_webhook(row, problem, own_secret=own) else None


def reason(row: Notification) -> str | None:
    """Why the row stands where it does, in a line: a configuration hold, an open circuit
    holding it, its last error, or the error a requeue cleared (`previous: ...`) until a
    firing delivers."""
    problem = held(row)
    if problem:
        return gettext("held: %(problem)s") % {"problem": problem}
    if row.held_for:
        return gettext("held: circuit open for %(target)s") % {"target": row.held_for}
    if row.last_error:
        return partial_causes.describe(row) or row.last_error
    if row.previous_error:
        return gettext("previous: %(error)s") % {"error": row.previous_error}
    return None


def target_line(row: Notification, channel: str) -> SafeString:
    """One line of the list's *sends to*: a webhook's host whole and its path's end, or the
    recipient, cut at the column's edge; the whole on hover."""
    if channel == "webhook" and row.webhook_url:
        return display.target(channel, row.webhook_url)
    where = channel_target(row, channel)
    return format_html('<span class="nq-clip" title="{}: {}">{}</span>', channel, where, where)


def channel_target(row: Notification, channel: str) -> str:
    """Where `channel` of `row` delivers: the first recipient (`ada@example.com +2`), or the
    webhook's host and path; `?` when the row lacks it (written around validation)."""
    if channel == "email":
        return addresses.compact(row.email_to) or "?"
    if channel == "webhook":
        return display.webhook_target(row.webhook_url) if row.webhook_url else "?"
    return "?"


class AttemptInline(TabularInline):
    """The row's latest delivery attempts, newest first; read-only and bounded."""

    model = DeliveryAttempt
    verbose_name_plural = _("recent delivery attempts (latest 20, newest first)")  # ATTEMPTS_SHOWN
    # The firing id is on each attempt's own page (the link at the row's end).
    readonly_fields = ("attempted", "channel", "outcome_badge", "error_text", "http_status", "duration")
    fields = readonly_fields
    extra = 0
    can_delete = False
    show_change_link = True

    @admin.display(description=_("attempted"))
    def attempted(self, obj: DeliveryAttempt) -> SafeString | None:
        return moment(obj.attempted_at)

    @admin.display(description=_("outcome"))
    def outcome_badge(self, obj: DeliveryAttempt) -> SafeString:
        return outcome_badge(obj)

    @admin.display(description=_("error"))
    def error_text(self, obj: DeliveryAttempt) -> SafeString | str:
        return abbreviate_error(obj.error) or self.get_empty_value_display()

    @admin.display(description=_("duration"))
    def duration(self, obj: DeliveryAttempt) -> str:
        return milliseconds(obj.duration_ms)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NotificationChangeList(ChangeList):
    """The changelist, reading only `LIST_COLUMNS` (so are the rows its actions get).

    While the site cannot sign webhooks, each row also says whether it has a secret of
    its own (`signs_itself`, never the secret), so the list can tell the held rows."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        rows: QuerySet[Any] = super().get_queryset(request, exclude_parameters).only(*LIST_COLUMNS)
        # A partial failure's cause, from the delivery log, in the page's one query.
        rows = rows.annotate(**{partial_causes.ANNOTATION: partial_causes.latest_failure()})
        if signing_problem() is None:
            return rows
        own_secret = Case(When(webhook_secret="", then=Value(False)), default=Value(True))
        return cast(QuerySet[Any], rows.annotate(signs_itself=own_secret))


@admin.register(Notification)
class NotificationAdmin(ModelAdmin):
    form = NotificationForm
    change_list_template = "notifications/admin/notification_change_list.html"
    # Fits 1366 px with the sidebar open (the stylesheet fixes the widths): where a row
    # sends, its schedule, its state with the reason beside it, and when it fires next and
    # fired last (a line each, like a row's two channels).
    list_display = ["id", "sends_to", "schedule", "status", "firing"]
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
        "paused",
        "state_column",
        "upcoming",
        "owed",
        "error_count",
        "full_error",
        "last_fired",
        "dead_lettered",
        "claim",
        "firing_id",
        "history",
        "created",
        "updated",
        "secret_status",
    ]
    fieldsets = [
        (
            _("Status"),
            {
                "fields": [
                    "key",
                    "state_column",
                    "error_count",
                    "full_error",
                    "owed",
                    "last_fired",
                    "dead_lettered",
                    "paused",
                ]
            },
        ),
        (_("Schedule"), {"fields": ["recurrence_rule", "timezone", "next_fire_at", "upcoming"]}),
        (_("Limits"), {"fields": ["expires_at", "max_delay", "quiet_hours", "max_retries", "backoff"]}),
        (
            _("Email"),
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
        (_("Webhook"), {"fields": ["webhook_url", "secret_status", "webhook_secret", "clear_webhook_secret"]}),
        (_("Delivery"), {"fields": ["channels", "payload", "firing_id", "claim", "history", "created", "updated"]}),
    ]
    add_fieldsets = [
        (None, {"fields": ["channels", "email_to", "subject", "body", "webhook_url", "webhook_secret", "payload"]}),
        (_("Schedule"), {"fields": ["recurrence_rule", "timezone", "next_fire_at"]}),
    ]

    # --- columns ---------------------------------------------------------------------

    Media = display.Styles

    @admin.display(description=_("sends to"))
    def sends_to(self, obj: Notification) -> SafeString | None:
        """One line per channel: the recipient, or the webhook's host and path."""
        lines = [(target_line(obj, channel),) for channel in obj.channel_list]
        return format_html_join("", "{}", lines) if lines else None

    def target(self, obj: Notification) -> str:
        """Recipient and webhook host and path, as text (the purge confirmation page)."""
        return ", ".join(channel_target(obj, channel) for channel in obj.channel_list) or "?"

    @admin.display(description=_("schedule"))
    def schedule(self, obj: Notification) -> SafeString | str:
        if not obj.recurrence_rule:
            return gettext("one-shot")
        return display.clip(f"{obj.recurrence_rule} ({obj.timezone})")

    @admin.display(description=_("state"))
    def status(self, obj: Notification) -> SafeString:
        """The state and, beside it, why: one line, cut to the column, the whole on hover."""
        state = obj.state()
        tries: SafeString | str = ""
        if state == State.RETRYING:
            tries = format_html(
                ' <span class="nq-tries" title="{}">&times;{}</span>',
                ngettext("%(count)d failed attempt", "%(count)d failed attempts", obj.error_count)
                % {"count": obj.error_count},
                obj.error_count,
            )
        why = reason(obj) or ""
        hover = why or state.label
        return format_html('<span class="nq-status" title="{}">{}{} {}</span>', hover, state_badge(state), tries, why)

    @admin.display(description=_("next / last firing"), ordering="next_fire_at")
    def firing(self, obj: Notification) -> SafeString | None:
        """`next in 4 min` over `last 12 s ago`, worded as the header counts: a paused row says
        `paused 3 h ago` (it does not fire), a due time passed says `due 6 min ago` (an overdue
        retry is due too); a line is left out when there is no such time."""
        upcoming: tuple[str, datetime | None]
        if obj.paused_at is not None:
            upcoming = (gettext("paused"), obj.paused_at)
        elif obj.next_fire_at is not None and obj.next_fire_at <= timezone.now():
            upcoming = (gettext("due"), obj.next_fire_at)
        else:
            upcoming = (gettext("next"), obj.next_fire_at)
        lines = [
            (label, moment(value))
            for label, value in (upcoming, (gettext("last"), obj.last_fired_at))
            if value is not None
        ]
        if not lines:
            return None
        return format_html_join("", '<span class="nq-clip"><span class="nq-quiet">{}</span> {}</span>', lines)

    @admin.display(description=_("last fired"), ordering="last_fired_at")
    def last_fired(self, obj: Notification) -> SafeString | str:
        return self.or_empty(moment(obj.last_fired_at))

    # --- change page -----------------------------------------------------------------

    @admin.display(description=_("state"))
    def state_column(self, obj: Notification) -> SafeString:
        return state_badge(obj.state())

    @admin.display(description=_("last error"))
    def full_error(self, obj: Notification) -> SafeString | str:
        why = reason(obj)
        return format_html("<code>{}</code>", why) if why else self.or_empty(None)

    @admin.display(description=_("channels still owed"))
    def owed(self, obj: Notification) -> str | None:
        if obj.resend_channels:
            return gettext("%(channels)s (failed; a requeue sends only these)") % {
                "channels": ", ".join(obj.resend_channels)
            }
        return ", ".join(obj.owed_channels) or self.or_empty(None)

    def or_empty(self, value: SafeString | str | None) -> SafeString | str:
        """`value`, or the admin's one empty-value marker: read-only fields on a change page
        would show None as the word (lists show the marker themselves)."""
        return self.get_empty_value_display() if value is None else value

    @admin.display(description=_("dead-lettered"))
    def dead_lettered(self, obj: Notification) -> SafeString | str:
        return self.or_empty(moment(obj.dead_lettered_at))

    @admin.display(description=_("paused"))
    def paused(self, obj: Notification) -> SafeString | str:
        return self.or_empty(moment(obj.paused_at))

    @admin.display(description=_("created"))
    def created(self, obj: Notification) -> SafeString | str:
        return self.or_empty(moment(obj.created_at))

    @admin.display(description=_("updated"))
    def updated(self, obj: Notification) -> SafeString | str:
        return self.or_empty(moment(obj.updated_at))

    @admin.display(description=_("claimed by a tick until"))
    def claim(self, obj: Notification) -> SafeString | str | None:
        if obj.claimed_until and obj.claimed_until > timezone.now():
            return moment(obj.claimed_until)
        return gettext("not claimed")

    @admin.display(description=_("next 5 occurrences"))  # UPCOMING_SHOWN
    def upcoming(self, obj: Notification) -> SafeString | str:
        """The rule's next firings in the row's zone and, unless that reads the same, in UTC
        (DST shows in the offset)."""
        if not obj.recurrence_rule:
            return gettext("one-shot: fires once, at the due time")
        now = timezone.now()
        try:
            times = schedule.upcoming(
                obj.recurrence_rule, obj.timezone, now, UPCOMING_SHOWN, anchor=obj.recurrence_anchor
            )
        except schedule.InvalidRule as exc:
            return gettext("cannot compute: %(error)s") % {"error": exc}
        if not times:
            return gettext("none: the rule has no occurrence left")
        pairs = [(when(t, obj.timezone), when(t, "UTC")) for t in times]
        if all(local == utc for local, utc in pairs):  # a UTC row: one column says it all
            rows = format_html_join("", "<tr><td>{}</td></tr>", ((local,) for local, _utc in pairs))
            head = format_html("<th>{}</th>", obj.timezone)
        else:
            rows = format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", pairs)
            head = format_html("<th>{}</th><th>UTC</th>", obj.timezone)
        return format_html('<table class="nq-upcoming"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, rows)

    @admin.display(description=_("webhook secret"))
    def secret_status(self, obj: Notification) -> str:
        """Whether the row signs with a secret of its own; the value itself is never shown."""
        return gettext("set") if obj.webhook_secret else gettext("not set")

    @admin.display(description=_("delivery history"))
    def history(self, obj: Notification) -> SafeString | None:
        if obj.pk is None:
            return None
        url = reverse("admin:notifications_deliveryattempt_changelist") + f"?notification_id={obj.pk}"
        count = DeliveryAttempt.objects.filter(notification_id=obj.pk).count()
        if not count:
            return format_html("{} ({})", gettext("no attempts yet"), kept_for())
        return format_html(
            '<a href="{}">{}</a> ({})',
            url,
            ngettext("%(count)d attempt", "all %(count)d attempts", count) % {"count": count},
            kept_for(),
        )

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
                gettext(
                    "This row's stored payload cannot be shown: it is nested deeper than %(depth)d levels or "
                    "is not JSON the app can read, so the tick dead-letters it. It appears as null below: enter "
                    "a new payload to repair the row, or purge it."
                )
                % {"depth": validation.MAX_PAYLOAD_DEPTH},
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
            self.message_user(
                request, gettext("Notification %(id)s no longer exists.") % {"id": unquote(object_id)}, messages.WARNING
            )
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
        tiles = [
            {"state": s, "label": s.label, "count": health.counts.get(s.value, 0), "url": f"{base}?state={s.value}"}
            for s in FILTER_STATES
        ]
        activity = charts.activity(health.now)  # one query, over the tick records
        pictures = [
            charts.panel(gettext("Firings per hour, last 24 hours"), activity["hours"]),
            charts.panel(gettext("Firings per minute, last hour"), activity["minutes"]),
        ]
        context = {"health": health, "health_states": tiles, "activity_charts": pictures, **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes where the actions show (list or change form) and deprecates an
        # override without the parameter; 5.2 has none.
        base = super().get_actions
        actions = base(request) if action_location is None else base(request, action_location)  # type: ignore[call-arg]
        actions.pop("delete_selected", None)  # `purge` replaces it, with the queue's own confirmation
        return actions

    @admin.action(description=_("Requeue selected dead letters and partial failures"), permissions=["change"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.requeue(queryset)
        done = ngettext("Requeued %(count)d notification.", "Requeued %(count)d notifications.", result.changed)
        resends = any(r.pending_channels for r in result.rows)
        note = gettext("Partial failures resend only their failed channels.") if resends else ""
        self.report(request, result, done, "Requeued: due now with a clean retry count.", note)

    @admin.action(description=_("Run selected notifications now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.RUN_NOW, queryset)
        done = ngettext("Made %(count)d notification due now.", "Made %(count)d notifications due now.", result.changed)
        recurring = any(r.is_recurring for r in result.rows)
        note = gettext("Recurring ones then continue their schedule.") if recurring else ""
        self.report(request, result, done, "Run now: made due now.", note)

    @admin.action(description=_("Pause selected notifications"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.PAUSE, queryset)
        done = ngettext("Paused %(count)d notification.", "Paused %(count)d notifications.", result.changed)
        note = gettext("Paused rows send nothing until resumed.") if result.changed else ""
        self.report(request, result, done, "Paused.", note)

    @admin.action(description=_("Resume selected paused notifications"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.RESUME, queryset)
        done = ngettext("Resumed %(count)d notification.", "Resumed %(count)d notifications.", result.changed)
        note = (
            gettext("Recurring ones continue at their next occurrence; missed occurrences are not sent.")
            if any(r.is_recurring for r in result.rows)
            else ""
        )
        self.report(request, result, done, "Resumed.", note)

    def report(self, request: HttpRequest, result: services.ActionResult, done: str, logged: str, note: str) -> None:
        """Log the changed rows and tell the operator: `done` (with a `%(count)d`), what was
        skipped and why, then `note`."""
        if result.rows:
            LogEntry.objects.log_actions(
                user_id=cast(int, request.user.pk),  # the admin requires a logged-in user
                queryset=result.rows,
                action_flag=CHANGE,
                change_message=logged,
            )
        message = sentences(done % {"count": result.changed}, *skipped_sentences(result.skipped), note)
        level = messages.SUCCESS if result.changed and not result.skipped else messages.WARNING
        self.message_user(request, message, level)

    @admin.action(description=_("Purge selected notifications"), permissions=["delete"])
    def purge(self, request: HttpRequest, queryset: QuerySet[Notification]) -> TemplateResponse | None:
        """Delete after a confirmation page, like Django's `delete_selected`."""
        if request.POST.get("post"):
            selected = list(queryset)
            self.log_deletions(request, selected)  # type: ignore[arg-type] # a list works: it is only iterated
            deleted = services.purge(selected)
            done = ngettext("Purged %(count)d notification.", "Purged %(count)d notifications.", deleted)
            gone = len(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)) - deleted
            history = ngettext(
                "Its delivery history stays readable for %(days)s days.",
                "Their delivery history stays readable for %(days)s days.",
                deleted,
            )
            message = sentences(
                done % {"count": deleted},
                *skipped_sentences({gettext("already gone"): gone} if gone > 0 else {}),
                history % {"days": retention_days()} if deleted else "",
            )
            self.message_user(request, message, messages.SUCCESS if deleted else messages.WARNING)
            return None
        rows = list(queryset)
        context = {
            **self.admin_site.each_context(request),
            "title": ngettext("Purge %(count)d notification?", "Purge %(count)d notifications?", len(rows))
            % {"count": len(rows)},
            "subtitle": None,
            "rows": [
                {
                    "row": r,
                    "state": state_badge(r.state()),
                    "target": self.target(r),
                    "schedule": self.schedule(r),
                    "reason": reason(r),
                }
                for r in rows
            ],
            "queryset": rows,
            "kept_for": kept_for(),
            "empty_value_display": self.get_empty_value_display(),
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "notifications/admin/purge_confirmation.html", context)


# The change page's buttons, in this order: each the list action of that name, shown to
# users who may run it, on rows it applies to (`services.refusal`).
ROW_ACTIONS = {
    "requeue": _("Requeue"),
    "run_now": _("Run now"),
    "pause": _("Pause"),
    "resume": _("Resume"),
    "purge": _("Purge…"),
}


def row_status(row: Notification, now: datetime) -> SafeString:
    """What happened to `row` and what comes next, in a sentence or two, for its change page."""
    state = row.state(now)
    error = format_html("<code>{}</code>", row.last_error) if row.last_error else gettext("none recorded")
    upcoming = (
        gettext("It does not fire again until requeued.")
        if row.next_fire_at is None
        else format_html(gettext("Its schedule goes on: next firing {}."), moment(row.next_fire_at, now))
    )
    if state == State.DEAD:
        return format_html(
            gettext("<strong>Dead letter</strong>: the firing was given up {}. Last error: {}. {}"),
            moment(row.dead_lettered_at, now),
            error,
            upcoming,
        )
    if state == State.EXPIRED:
        return format_html(
            gettext("<strong>Expired</strong>: the firing came too late and was not sent ({}; {}). {}"),
            moment(row.expired_at, now),
            error,
            upcoming,
        )
    if state == State.PARTIAL:
        causes = partial_causes.causes_of(row)
        failed = format_html_join(
            ", ",
            "{}{}",
            (
                (channel, format_html(" (<code>{}</code>)", causes[channel]) if channel in causes else "")
                for channel in row.resend_channels
            ),
        )
        return format_html(
            gettext(
                "<strong>Partial failure</strong> {}: {} did not go out. Last error: {}. "
                "A requeue sends only those again."
            ),
            moment(row.last_fired_at, now),
            failed or gettext("no channel it still has"),
            error,
        )
    return format_html("{}{}", _healthy_status(row, state, error, now), _held_or_previous(row))


def _healthy_status(row: Notification, state: State, error: SafeString | str, now: datetime) -> SafeString:
    due = moment(row.next_fire_at, now)
    if state == State.PAUSED:
        return format_html(
            gettext("<strong>Paused</strong> {}: nothing is sent until it is resumed."), moment(row.paused_at, now)
        )
    if state == State.RETRYING:
        attempts = ngettext("%(count)d failed attempt", "%(count)d failed attempts", row.error_count) % {
            "count": row.error_count
        }
        return format_html(
            gettext("<strong>Retrying</strong> after {}; next attempt {}. Last error: {}."), attempts, due, error
        )
    if state == State.DUE:
        return format_html(gettext("<strong>Due</strong>: it came due {}; the next tick sends it."), due)
    if state == State.SCHEDULED:
        return format_html(gettext("<strong>Scheduled</strong>: next firing {}."), due)
    return mark_safe(gettext("<strong>Parked</strong>: it has no due time and does not fire."))  # noqa: S308 - constant


def _held_or_previous(row: Notification) -> SafeString | str:
    """A live row's note: held for the site's signing secret, or the error a requeue cleared."""
    problem = held(row)
    if problem:
        return format_html(
            " " + gettext("Held: {}. Nothing is sent and no retry is spent until the site has a key to sign with."),
            problem,
        )
    if row.previous_error and not row.last_error:
        return format_html(" " + gettext("Before the requeue: {}."), format_html("<code>{}</code>", row.previous_error))
    return ""


def sentences(*parts: str) -> str:
    """The non-empty `parts`, one after the other."""
    return " ".join(part for part in parts if part)


def skipped_sentences(skipped: dict[str, int]) -> list[str]:
    """`3 skipped: nothing failed (not a dead letter or partial failure).`, one per reason."""
    return [
        gettext("%(count)d skipped: %(reason)s.") % {"count": count, "reason": why}
        for why, count in skipped.items()
        if count
    ]


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
    if attempt.outcome == DeliveryAttempt.Outcome.OK or not attempt.error_class:
        return badge
    return format_html('{} <span class="nq-quiet">{}</span>', badge, attempt.error_class)


def milliseconds(value: int) -> str:
    """`212 ms`, `1.25 s`."""
    return gettext("%(ms)d ms") % {"ms": value} if value < 1000 else gettext("%(s).2f s") % {"s": value / 1000}


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ModelAdmin):
    """The append-only delivery log: read-only, kept for NOTIFICATIONS_ATTEMPT_RETENTION_DAYS.

    The list fits 1366 px with the sidebar open: the error class rides with the outcome,
    the HTTP status is in the error text (and a filter away)."""

    list_display = ["attempted", "notification_link", "channel", "outcome_badge", "error_text", "duration"]
    list_filter = [NotificationIdFilter, "outcome", "channel", "error_class", "http_status", "attempted_at"]
    search_fields = ["error"]
    date_hierarchy = "attempted_at"
    list_per_page = 100
    readonly_fields = (
        "attempted",
        "notification_link",
        "firing_id",
        "channel",
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

    @admin.display(description=_("outcome"), ordering="outcome")
    def outcome_badge(self, obj: DeliveryAttempt) -> SafeString:
        return outcome_badge(obj)

    @admin.display(description=_("error"))
    def error_text(self, obj: DeliveryAttempt) -> SafeString | None:
        return abbreviate_error(obj.error)

    @admin.display(description=_("duration"), ordering="duration_ms")
    def duration(self, obj: DeliveryAttempt) -> str:
        return milliseconds(obj.duration_ms)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # history is append-only; the tick prunes it past retention


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
class TickRunAdmin(ModelAdmin):
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


from .admin_targets import TargetAdmin  # noqa: E402, F401 - registers the Targets list
from .suppression_admin import SuppressionAdmin  # noqa: E402, F401 - registers the Suppressions list
