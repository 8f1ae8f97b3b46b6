"""The operator's console: the queue by state, why rows failed, requeue and purge.

Every state change goes through `notifications.services`, the module the tick uses too:
actions, and the add and change pages' saves. States are `notifications.models.states`.
The changelist costs a fixed number of queries whatever the page size: the columns read
only the row itself, and the health header is two aggregate queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.db.models import Case, Max, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from notifications import services
from notifications.admin import charts, digests, display, partial_causes, row_text, subjects
from notifications.admin.attachments import AttachmentsAdminMixin
from notifications.admin.base import ModelAdmin, TabularInline
from notifications.admin.display import moment
from notifications.admin.filters import FILTER_STATES, ChannelFilter, RecurrenceFilter, StateFilter
from notifications.admin.forms import SECRET_FIELD, NotificationForm
from notifications.admin.log import kept_for, milliseconds, outcome_badge, retention_days
from notifications.admin.recipients import CategoryFilter, can_erase, erase_recipients
from notifications.admin.status import (
    abbreviate_error,
    destination,
    reason,
    row_status,
    sentences,
    signing_problem,
    skipped_sentences,
    state_badge,
    target_line,
    when,
)
from notifications.channels import registry
from notifications.databases import sliced_ids
from notifications.health.queue import count_states, queue_health
from notifications.models import (
    DeliveryAttempt,
    Notification,
    Routing,
    validation,
)
from notifications.models.states import State
from notifications.rules import schedule
from notifications.services.actions import ACTION_BATCH

ATTEMPTS_SHOWN = 20  # delivery attempts on a change page; the rest are one click away
UPCOMING_SHOWN = 5
PURGE_SHOWN = 100  # rows the purge confirmation lists; the rest are counted per state
# What a select-all's purge confirmation posts back instead of its rows: how many it
# counted, and the highest pk among them.
PURGE_COUNT, PURGE_UPTO = "purge_count", "purge_upto"

# The columns the changelist (and its actions' confirmation pages) read: the body, which
# can be large, is never loaded for a list, nor is a secret; the payload only for a row
# whose subject is a template (`subjects.payload_of_templates`).
LIST_COLUMNS = (
    "id",
    "priority",
    "mailer",
    "channels",
    "email_to",
    "subject",
    "template",
    "language",
    "key",
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
    "digest_key",
    "digest_id",
    "escalation_of",  # the `escalation` state, and its deadline on the list
    "attachments",  # whether the row is held for the attachments' storage (`held`): a small list, no content
    "category",  # whether the row is held for the unsubscribe links' public URL (`held`)
)


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
        rows = digests.with_sizes(rows)  # a digest's size, beside its rows' state
        if signing_problem() is None:
            return rows
        own_secret = Case(When(webhook_secret="", then=Value(False)), default=Value(True))
        return cast(QuerySet[Any], rows.annotate(signs_itself=own_secret))

    def get_results(self, request: HttpRequest) -> None:
        """The page's rows, each templated subject rendered as it goes out (`subjects`): the
        page's own query loads those rows' payloads; an action's rows load none."""
        self.queryset = self.queryset.annotate(**{subjects.ANNOTATION: subjects.payload_of_templates()})
        super().get_results(request)
        subjects.render_page(self.result_list)
        self.id_digits = max((len(str(row.pk)) for row in self.result_list), default=1)  # the id column's width


@admin.register(Notification)
class NotificationAdmin(AttachmentsAdminMixin, ModelAdmin):
    form = NotificationForm
    change_list_template = "notifications/admin/notification_change_list.html"
    # Fits 1366 px with the sidebar open (the stylesheet fixes the widths): where a row
    # sends, its schedule, its state with the reason beside it, and when it fires next and
    # fired last (a line each, like a row's two channels).
    # The priority rides in the schedule column, a second line when it is not `normal`: a
    # column of its own would not leave the state's reason room at 1366 px.
    list_display = ["id", "sends_to", "subject_or_event", "status", "firing"]
    list_display_links = ["id"]
    list_filter = [StateFilter, ChannelFilter, RecurrenceFilter, "priority", CategoryFilter, digests.DigestFilter]
    search_fields = ["key", "email_to", "webhook_url", "last_error", "recipient"]
    date_hierarchy = "next_fire_at"
    list_per_page = 100
    show_full_result_count = False  # a second COUNT(*) per page; the health header has the totals
    actions = ["requeue", "run_now", "pause", "resume", "purge", erase_recipients]
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
        "delivered_by",
        "created",
        "updated",
        "secret_status",
        "attachment_list",
        "queued_message",
        "html_alternative",
        "digest_key",
        "digest_window",
        "digest_members",
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
                    "version",  # hidden: the row's updated_at when the page was loaded
                ]
            },
        ),
        (_("Schedule"), {"fields": ["recurrence_rule", "timezone", "next_fire_at", "upcoming"]}),
        (_("Limits"), {"fields": ["expires_at", "max_delay", "quiet_hours", "max_retries", "backoff"]}),
        (_("Digest"), {"fields": ["digest_key", "digest_window", "digest_members"]}),
        (_("Escalation"), {"fields": ["escalate_after", "escalate_to", "escalate_unless"], "classes": ["collapse"]}),
        (
            _("Email"),
            {
                "fields": [
                    "from_email",
                    "email_to",
                    "email_cc",
                    "email_bcc",
                    "reply_to",
                    "subject",
                    "body",
                    "html_body",
                    "template",
                    "language",
                    "headers",
                    "attachment_list",
                    "queued_message",
                    "html_alternative",
                    "mailer",
                ]
            },
        ),
        (
            _("Webhook"),
            {"fields": ["webhook_url", "secret_status", "webhook_secret", "clear_webhook_secret"]},
        ),
        (
            _("Delivery"),
            {
                "fields": [
                    "channels",
                    "routing",
                    "delivered_by",
                    "channel_data",
                    "recipient",
                    "category",
                    "priority",
                    "payload",
                    "firing_id",
                    "claim",
                    "history",
                    "created",
                    "updated",
                ]
            },
        ),
    ]
    add_fieldsets = [
        (
            None,
            {
                "fields": [
                    "channels",
                    "routing",
                    "channel_data",
                    "priority",
                    "email_to",
                    "subject",
                    "body",
                    "webhook_url",
                    "webhook_secret",
                    "payload",
                ]
            },
        ),
        (_("Schedule"), {"fields": ["recurrence_rule", "timezone", "next_fire_at"]}),
    ]

    def has_erase_permission(self, request: HttpRequest) -> bool:
        """Erasing a person (`erase_recipients`) deletes rows and preferences both."""
        return can_erase(request)

    # --- columns ---------------------------------------------------------------------

    Media = display.Styles

    @admin.display(description=_("sends to"))
    def sends_to(self, obj: Notification) -> SafeString | None:
        """One line per channel: the recipient, or the webhook's host and path."""
        lines = [(target_line(obj, channel),) for channel in obj.channel_list]
        return format_html_join("", "{}", lines) if lines else None

    def target(self, obj: Notification) -> str:
        """Recipient and webhook host and path, as text (the purge confirmation page)."""
        return ", ".join(destination(obj, channel) for channel in obj.channel_list) or "?"

    @admin.display(description=_("subject or event / schedule"))
    def subject_or_event(self, obj: Notification) -> SafeString:
        """What the row is (its subject, key or webhook event) over its schedule: a line
        each, cut to the column, the whole on hover."""
        return format_html("{}{}", row_text.subject_or_event(obj) or "", self.schedule(obj))

    @admin.display(description=_("schedule"))
    def schedule(self, obj: Notification) -> SafeString | str:
        """The rule (or one-shot), and below it the priority when it is not `normal`."""
        rule = f"{obj.recurrence_rule} ({obj.timezone})" if obj.recurrence_rule else gettext("one-shot")
        kind = "nq-recurring" if obj.recurrence_rule else "nq-one-shot"  # a phone shows only the rules
        when = format_html('<span class="nq-clip nq-quiet {}" title="{}">{}</span>', kind, rule, rule)
        if obj.priority == "normal":
            return when
        label = gettext("priority: %(priority)s") % {"priority": obj.get_priority_display().lower()}
        return format_html('{}<span class="nq-clip nq-priority">{}</span>', when, label)

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
        return format_html(
            '<span class="nq-status" title="{}">{}{} {}{}</span>',
            hover,
            state_badge(state),
            tries,
            why,
            digests.digest_line(obj),
        )

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
        elif obj.escalation_of is not None:  # the deadline: unread by then, it escalates
            upcoming = (gettext("escalates"), obj.next_fire_at)
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

    @admin.display(description=_("rows of its digest"))
    def digest_members(self, obj: Notification) -> SafeString | str:
        return self.or_empty(digests.digest_rows(obj))

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

    @admin.display(description=_("queued message"))
    def queued_message(self, obj: Notification) -> str:
        """What a message queued by QueuedEmailBackend carries besides its columns."""
        extras = obj.message if isinstance(obj.message, dict) else None
        if extras is None:
            return gettext("no (subject and body are templates)")
        kinds = [str(a.get("mimetype")) for a in extras.get("alternatives") or [] if isinstance(a, dict)]
        anymail = sorted(extras.get("anymail") or {})
        parts = [gettext("yes: sent as it is")]
        if kinds:
            parts.append(gettext("alternatives: %(kinds)s") % {"kinds": ", ".join(kinds)})
        if anymail:
            parts.append(gettext("django-anymail: %(names)s") % {"names": ", ".join(anymail)})
        return "; ".join(parts)

    @admin.display(description=_("HTML alternative"))
    def html_alternative(self, obj: Notification) -> SafeString | str:
        html = row_text.html_alternative(obj)
        return row_text.html_preview(html) if html is not None else self.or_empty(None)

    @admin.display(description=_("webhook secret"))
    def secret_status(self, obj: Notification) -> str:
        """Whether the row signs with a secret of its own; the value itself is never shown."""
        return gettext("set") if obj.webhook_secret else gettext("not set")

    @admin.display(description=_("delivered by"))
    def delivered_by(self, obj: Notification) -> str | None:
        """Routing `first`: the channels its last delivered firing tried, in order, and the
        one that delivered (`email failed, sms delivered`)."""
        if obj.pk is None or obj.routing != Routing.FIRST:
            return None
        attempts = DeliveryAttempt.objects.filter(notification_id=obj.pk)
        last = attempts.filter(outcome=DeliveryAttempt.AttemptOutcome.OK).order_by("-attempted_at", "-pk").first()
        if last is None:
            return gettext("none yet")
        tried = attempts.filter(firing_id=last.firing_id, attempted_at=last.attempted_at).order_by("pk")
        return ", ".join(
            gettext("%(channel)s delivered") % {"channel": a.channel}
            if a.outcome == DeliveryAttempt.AttemptOutcome.OK
            else gettext("%(channel)s failed") % {"channel": a.channel}
            for a in tried
        )

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
        if row_text.html_alternative(obj) is None:
            hidden.add("html_alternative")
        if not obj.channel_data and all(registry.is_built_in(name) for name in registry.names()):
            # What the site's own channels need: nothing to say on a site that has none.
            hidden.add("channel_data")
        if obj.routing != Routing.FIRST:
            hidden.add("delivered_by")  # which channel of an ordered fallback delivered
        if not obj.digest_key:
            # Read-only, and empty for a row that joins no digest: no room taken on its page.
            hidden |= {"digest_key", "digest_window", "digest_members"}
        fieldsets = [
            (name, {**opts, "fields": [f for f in opts["fields"] if f not in hidden]}) for name, opts in self.fieldsets
        ]
        fieldsets = [(name, opts) for name, opts in fieldsets if opts["fields"]]
        return row_text.fold_other_channels(fieldsets, obj.channel_list)

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
                % {"depth": validation.max_payload_depth()},
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
            latest_ids = sliced_ids(latest, connection)
            kwargs["queryset"] = kwargs["queryset"].filter(pk__in=latest_ids).order_by("-attempted_at", "-id")
        return kwargs

    def save_model(self, request: HttpRequest, obj: Notification, form: NotificationForm, change: bool) -> None:
        # The form applied the due-time rule to check it; this saves it, at the same instant.
        data = form.cleaned_data
        services.edit(obj, data, changed=form.changed_data, now=form.edited_at, version=data.get("version"))

    def delete_model(self, request: HttpRequest, obj: Notification) -> None:
        services.purge([obj])  # the change page's Delete link: the one writer deletes

    # --- the change page's buttons: the list actions, on one row ---------------------

    def get_urls(self) -> list[URLPattern]:
        act = path(
            "<path:object_id>/act/<str:action>/",
            self.admin_site.admin_view(self.row_action_view),  # login, staff, CSRF
            name=f"{self.opts.app_label}_{self.opts.model_name}_act",
        )
        return [act, *self.attachment_urls(), *super().get_urls()]

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
        log = ChunkLog(request, "Requeued: due now with a clean retry count.", lambda r: bool(r.pending_channels))
        result = services.requeue(queryset, on_chunk=log)
        done = ngettext("Requeued %(count)d notification.", "Requeued %(count)d notifications.", result.changed)
        note = gettext("Partial failures resend only their failed channels.") if log.noted else ""
        self.report(request, result, done, note)

    @admin.action(description=_("Run selected notifications now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        log = ChunkLog(request, "Run now: made due now.", lambda r: r.is_recurring)
        result = services.act(services.RUN_NOW, queryset, on_chunk=log)
        done = ngettext("Made %(count)d notification due now.", "Made %(count)d notifications due now.", result.changed)
        note = gettext("Recurring ones then continue their schedule.") if log.noted else ""
        self.report(request, result, done, note)

    @admin.action(description=_("Pause selected notifications"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        result = services.act(services.PAUSE, queryset, on_chunk=ChunkLog(request, "Paused."))
        done = ngettext("Paused %(count)d notification.", "Paused %(count)d notifications.", result.changed)
        note = gettext("Paused rows send nothing until resumed.") if result.changed else ""
        self.report(request, result, done, note)

    @admin.action(description=_("Resume selected paused notifications"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        log = ChunkLog(request, "Resumed.", lambda r: r.is_recurring)
        result = services.act(services.RESUME, queryset, on_chunk=log)
        done = ngettext("Resumed %(count)d notification.", "Resumed %(count)d notifications.", result.changed)
        note = (
            gettext("Recurring ones continue at their next occurrence; missed occurrences are not sent.")
            if log.noted
            else ""
        )
        self.report(request, result, done, note)

    def report(self, request: HttpRequest, result: services.ActionResult, done: str, note: str) -> None:
        """Tell the operator: `done` (with a `%(count)d`), what was skipped and why, then `note`.
        The changed rows were logged as the action went (`ChunkLog`)."""
        message = sentences(done % {"count": result.changed}, *skipped_sentences(result.skipped), note)
        level = messages.SUCCESS if result.changed and not result.skipped else messages.WARNING
        self.message_user(request, message, level)

    @admin.action(description=_("Purge selected notifications"), permissions=["delete"])
    def purge(self, request: HttpRequest, queryset: QuerySet[Notification]) -> TemplateResponse | None:
        """Delete after a confirmation page, like Django's `delete_selected`, at a cost that
        does not grow with the selection (a select-all can be 150,000 rows): the page counts
        the rows per state and lists the first PURGE_SHOWN, and the rows are logged and
        deleted a chunk at a time."""
        across = bool(self.action_form.base_fields["select_across"].clean(request.POST.get("select_across")))
        if request.POST.get("post"):
            confirmed = confirmed_selection(request, queryset, across)
            if confirmed is not None:
                pks, asked = confirmed
                if len(pks) <= asked:
                    self.purge_rows(request, pks, asked)
                    return None
                grown = ngettext(
                    "%(count)d notification matches now, more than the %(confirmed)d you confirmed: nothing "
                    "was purged. Check the new count and confirm again.",
                    "%(count)d notifications match now, more than the %(confirmed)d you confirmed: nothing "
                    "was purged. Check the new count and confirm again.",
                    len(pks),
                )
                self.message_user(request, grown % {"count": len(pks), "confirmed": asked}, messages.WARNING)
        return self.purge_confirmation(request, queryset, across)

    def purge_rows(self, request: HttpRequest, pks: list[Any], asked: int) -> None:
        """Purge the rows `pks` (those that still exist) and tell the operator, who asked for `asked`."""
        deleted = services.purge(self.logged_deletions(request, pks))
        done = ngettext("Purged %(count)d notification.", "Purged %(count)d notifications.", deleted)
        gone = asked - deleted
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

    def logged_deletions(self, request: HttpRequest, pks: list[Any]) -> Iterator[Notification]:
        """The rows `pks` that still exist, each logged as deleted before it is yielded (Django
        logs before deleting), ACTION_BATCH at a time: only what a log entry reads is loaded
        (`__str__`: the pk and the channels), so memory does not grow with the selection."""
        for start in range(0, len(pks), ACTION_BATCH):
            chunk = Notification.objects.filter(pk__in=pks[start : start + ACTION_BATCH]).order_by("pk")
            rows = list(chunk.only("channels"))
            self.log_deletions(request, rows)  # type: ignore[arg-type] # a list works: it is only iterated
            yield from rows

    def purge_confirmation(
        self, request: HttpRequest, queryset: QuerySet[Notification], across: bool
    ) -> TemplateResponse:
        """The page: the total and the rows per state (one aggregate query), the first
        PURGE_SHOWN rows, and a form whose size does not grow with a select-all."""
        counts, facts = count_states(queryset, timezone.now(), highest=Max("pk"))
        total = sum(counts.values())  # the states partition the rows
        shown = list(queryset[:PURGE_SHOWN])
        # Django's changelist takes a post for an action's confirmation only with rows in
        # `_selected_action`. A select-all posts the rows shown (as the list posts its page's
        # boxes) with `select_across`: Django then re-reads the list's rows from its filters
        # in the address, which the form posts back to. Any other selection is at most a
        # page and goes back row by row.
        posted = [r.pk for r in shown] if across else list(queryset.values_list("pk", flat=True))
        context = {
            **self.admin_site.each_context(request),
            "title": ngettext("Purge %(count)d notification?", "Purge %(count)d notifications?", total)
            % {"count": total},
            "subtitle": None,
            "total": total,
            "states": [{"state": state_badge(State(value)), "count": n} for value, n in counts.items() if n],
            "rows": [
                {
                    "row": r,
                    "state": state_badge(r.state()),
                    "target": self.target(r),
                    "schedule": self.schedule(r),
                    "reason": reason(r),
                }
                for r in shown
            ],
            "more": max(total - len(shown), 0),
            "select_across": across,
            "posted": posted,
            "purge_fields": {PURGE_COUNT: total, PURGE_UPTO: facts["highest"]} if across else {},
            "kept_for": kept_for(),
            "empty_value_display": self.get_empty_value_display(),
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "notifications/admin/purge_confirmation.html", context)


class ChunkLog:
    """An action's `on_chunk`: logs each chunk's changed rows in the chunk's own transaction
    (as Django logs a change with its save), and notes whether any of them is `noteworthy`.

    The rows are not kept, so a select-all of 100,000 rows neither holds them all in memory
    nor writes their log entries in one transaction after the last chunk (on SQLite, the
    host site's writes would wait behind it).
    """

    def __init__(self, request: HttpRequest, message: str, noteworthy: Callable[[Notification], bool] | None = None):
        self.user_id = cast(int, request.user.pk)  # the admin requires a logged-in user
        self.message = message
        self.noteworthy = noteworthy
        self.noted = False

    def __call__(self, rows: list[Notification]) -> None:
        if not rows:
            return
        LogEntry.objects.log_actions(
            user_id=self.user_id,
            queryset=rows,  # a list works: it is only iterated
            action_flag=CHANGE,
            change_message=self.message,
        )
        if self.noteworthy is not None and not self.noted:
            self.noted = any(self.noteworthy(r) for r in rows)


def confirmed_selection(
    request: HttpRequest, queryset: QuerySet[Notification], across: bool
) -> tuple[list[Any], int] | None:
    """The pks a confirmed purge takes and how many rows the operator confirmed; None for a
    select-all posted without what its confirmation page sends back.

    A select-all is confirmed by its count, not row by row. It takes the list's rows up to
    the highest pk the page counted: rows added to the queue since were not in that count
    and are left for another purge. Rows gone since are reported as already gone; if more
    rows match than were counted (a row dead-lettered meanwhile, on a list of dead
    letters), `purge` asks again rather than delete rows the operator was never told of.
    """
    if not across:
        pks = list(queryset.order_by("pk").values_list("pk", flat=True))
        return pks, len(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
    upto, count = posted_int(request, PURGE_UPTO), posted_int(request, PURGE_COUNT)
    if upto is None or count is None:
        return None
    return list(queryset.filter(pk__lte=upto).order_by("pk").values_list("pk", flat=True)), count


def posted_int(request: HttpRequest, name: str) -> int | None:
    """The posted field `name` as a number, None when absent or not one."""
    try:
        return int(request.POST.get(name) or "")
    except ValueError:
        return None


# The change page's buttons, in this order: each the list action of that name, shown to
# users who may run it, on rows it applies to (`services.refusal`).
ROW_ACTIONS = {
    "requeue": _("Requeue"),
    "run_now": _("Run now"),
    "pause": _("Pause"),
    "resume": _("Resume"),
    "purge": _("Purge…"),
}
