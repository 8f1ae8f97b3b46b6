"""Digests in the admin: the list's `?digest=` filter (open digests, every row in one, or
one digest's rows), the line beside a row's state that names its digest, and the change
page's list of the digest's rows."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from notifications.admin.display import moment
from notifications.models import Notification, states

# The list's annotation: how many rows the row's digest holds (one subquery per page).
SIZE = "digest_size"
ROWS_SHOWN = 100  # rows of a digest its change page links to; the rest are one click away


class DigestFilter(admin.SimpleListFilter):
    """`?digest=open` (rows of open digests), `?digest=any` (rows in any digest), or
    `?digest=<id>` (one digest's rows, the link beside each of them)."""

    title = _("digest")
    parameter_name = "digest"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("open", gettext("open digests")), ("any", gettext("in a digest"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if value == "open":
            return queryset.filter(states.OPEN_DIGEST_ROWS.q(timezone.now()))
        if value == "any":
            return queryset.filter(digest_id__isnull=False)
        try:
            return queryset.filter(digest_id=uuid.UUID(value))
        except ValueError:
            return queryset.none()  # a forged or mistyped id names no digest


def with_sizes(rows: QuerySet[Any]) -> QuerySet[Any]:
    """`rows`, each with how many rows its digest holds (`digest_size`; 0 outside one)."""
    same = (
        Notification.objects.filter(digest_id=OuterRef("digest_id"))
        .order_by()
        .values("digest_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    sized: QuerySet[Any] = rows.annotate(**{SIZE: Coalesce(Subquery(same, output_field=IntegerField()), Value(0))})
    return sized


def rows_url(digest_id: Any) -> str:
    """The list of one digest's rows."""
    return f"{reverse('admin:notifications_notification_changelist')}?digest={digest_id}"


def digest_line(row: Notification) -> SafeString | str:
    """Beside a row's state in the list: its digest's size, when it closes (an open one),
    and a link to its rows. Empty outside a digest."""
    if row.digest_id is None:
        return ""
    size = getattr(row, SIZE, None)
    label = (
        ngettext("digest of %(count)d row", "digest of %(count)d rows", size) % {"count": size}
        if size
        else gettext("digest")
    )
    closes: SafeString | str = ""
    if row.paused_at is None and row.next_fire_at is not None and not row.error_count and row.dead_lettered_at is None:
        closes = format_html("{} {}", gettext("goes out"), moment(row.next_fire_at))
    return format_html(
        ' <a class="nq-digest" href="{}">{}</a> <span class="nq-quiet">{}</span>',
        rows_url(row.digest_id),
        label,
        closes,
    )


def digest_rows(row: Notification) -> SafeString | None:
    """The change page's list of the rows of `row`'s digest, oldest first, with links."""
    if row.digest_id is None:
        return None
    members = list(
        Notification.objects.filter(digest_id=row.digest_id)
        .order_by("pk")
        .values_list("pk", flat=True)[: ROWS_SHOWN + 1]
    )
    links = format_html_join(
        ", ",
        '<a href="{}">#{}</a>',
        ((reverse("admin:notifications_notification_change", args=[pk]), pk) for pk in members[:ROWS_SHOWN]),
    )
    more = "…" if len(members) > ROWS_SHOWN else ""
    return format_html(
        '{}{} (<a href="{}">{}</a>)', links, more, rows_url(row.digest_id), gettext("all rows of this digest")
    )
