"""A row's attachments in the admin: listed on its change page, downloadable with view permission.

The download is its own admin view (`<id>/attachment/<n>/`), wrapped in `admin_view` (login,
staff) and checking the model's view permission on the row itself, on the server: a link
copied to someone without it answers 403. The file goes out as a download
(`Content-Disposition: attachment`, `application/octet-stream`, `nosniff`), never rendered
by the browser in the admin's origin, whatever type the sender claimed.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.defaultfilters import filesizeformat
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from notifications.models import attachments


class AttachmentsAdminMixin:
    """For the Notification admin: `attachment_list` (a read-only field) and the download view."""

    admin_site: admin.AdminSite
    opts: Any

    def attachment_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/attachment/<int:index>/",
                self.admin_site.admin_view(self.attachment_view),  # login, staff
                name=f"{self.opts.app_label}_{self.opts.model_name}_attachment",
            )
        ]

    @admin.display(description=_("attachments"))
    def attachment_list(self, obj: Any) -> SafeString | str:
        """Name, type and size of each attachment; the name links to a download for users
        who may view the row (everyone who sees this page may: it needs the same permission)."""
        items = attachments.stored(obj.attachments) if obj is not None else []
        if not items:
            return gettext("none")
        site = self.admin_site.name
        rows = []
        for index, item in enumerate(items):
            url = reverse(
                f"{site}:{self.opts.app_label}_{self.opts.model_name}_attachment",
                args=[quote(obj.pk), index],
                current_app=site,
            )
            cid = item.get("content_id")
            rows.append(
                (
                    url,
                    item.get("name") or gettext("(no name)"),
                    item.get("mimetype", ""),
                    filesizeformat(item.get("size", 0)),
                    format_html(" · inline {}", cid) if cid else "",
                )
            )
        return format_html(
            "<ul>{}</ul>", format_html_join("", '<li><a href="{}" download>{}</a> ({}, {}){}</li>', rows)
        )

    def attachment_view(self, request: HttpRequest, object_id: str, index: int) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]  # ModelAdmin's
        if obj is None:
            raise Http404(gettext("No such notification."))
        if not self.has_view_permission(request, obj):  # type: ignore[attr-defined]  # ModelAdmin's
            raise PermissionDenied
        items = attachments.stored(obj.attachments)
        if not 0 <= index < len(items):
            raise Http404(gettext("No such attachment."))
        item = items[index]
        try:
            content = attachments.read_content(item)
        except FileNotFoundError:
            raise Http404(gettext("The attachment's file is gone from storage.")) from None
        response = HttpResponse(content, content_type="application/octet-stream")
        name = str(item.get("name") or "attachment")
        response.headers["Content-Disposition"] = _content_disposition(name)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def _content_disposition(name: str) -> str:
    """`attachment` with the file name, ASCII and RFC 5987 forms; no quote or line break gets through."""
    from urllib.parse import quote as url_quote

    ascii_name = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name) or "attachment"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{url_quote(name, safe='')}"
