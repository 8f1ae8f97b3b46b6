"""A row's subject in the list as its message goes out: its template rendered with its payload.

A row's `subject` is a notification template (`Hello {{ name }}`, a digest's `{{ count }} new
comments`). The list renders it with the row's payload, in the row's language, with the
engine and limits the tick uses (`notifications.content.templating`), so an operator reads
`Hello Grace` rather than the template. It stays bounded and safe:

- Only the rows whose subject is a template load their payload, in the page's one query
  (`payload_of_templates`); a queued message's subject is sent as it is and never rendered.
- One render is held to the engine's limits; all of a page's renders together to
  PAGE_SECONDS, after which the rest of the page shows its templates unrendered.
- Whatever a row holds, the page shows: a template that fails (a filter that raises, a limit
  reached, an unknown language) shows its text, marked, and why on hover. The result is
  plain text, escaped like every value of a row.

A row whose `template` names the site's template files is not rendered here: those files
are the site's own code (its engine, `{% include %}`, its tags), whose work has no bound a
list of 100 rows could afford. The list names the files instead (`files_label`).

A digest's subject goes out rendered with `count` (its rows) and `items` (every row's
payload): the list renders it with `count` once the digest has formed (the page reads each
digest's size), and leaves unrendered one that names `items` (every row's payload is more
than a list reads) or whose digest has not formed yet.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, F, JSONField, Q, When
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from notifications.admin import digests, display
from notifications.content.email import language_active
from notifications.content.templating import TemplateRenderError, render
from notifications.models import Notification

ANNOTATION = "template_payload"  # the list's annotation: the payload of a row whose subject is a template
SHOWN = "shown_subject"  # the attribute `render_page` sets on each row it rendered
PAGE_SECONDS = 0.5  # all of a page's renders together; one render alone stops at the engine's limit


@dataclass(frozen=True)
class Subject:
    """What the list shows for a templated subject: the rendered text, or the template's own
    text and why it was not rendered."""

    text: str
    problem: str = ""


def payload_of_templates() -> Case:
    """For a list's rows: the payload of each row whose subject is a template and whose
    message is not queued as it is (NULL for the others, which never load theirs)."""
    templated = Q(subject__contains="{", message__isnull=True)
    return Case(When(templated, then=F("payload")), default=None, output_field=JSONField())


def render_page(rows: Iterable[Notification]) -> None:
    """Render the subject of each of a page's `rows` that carries `ANNOTATION`, within
    PAGE_SECONDS, and keep it on the row as `SHOWN`."""
    deadline = time.monotonic() + PAGE_SECONDS
    for row in rows:
        payload = getattr(row, ANNOTATION, None)
        if payload is None:
            continue
        if time.monotonic() >= deadline:
            shown = Subject(row.subject, gettext("the page's time for rendering templates ran out"))
        else:
            shown = rendered(row, payload)
        setattr(row, SHOWN, shown)


def rendered(row: Notification, payload: Any) -> Subject:
    """`row`'s subject rendered with `payload` (and a digest's `count`), or its text and why not."""
    context = dict(payload) if isinstance(payload, dict) else {}
    if row.digest_key:  # it goes out with its digest's `count` and `items`
        size = getattr(row, digests.SIZE, 0)
        if row.digest_id is None or not size:
            return Subject(row.subject, gettext("its digest has not formed yet"))
        if "items" in row.subject:  # every row's payload: more than a list reads
            return Subject(row.subject, gettext("it names the digest's items"))
        context["count"] = size
    try:
        with language_active(row.language):
            text = render(row.subject, context)
    except TemplateRenderError as exc:  # its message names the rule broken, never the payload
        return Subject(row.subject, str(exc))
    except Exception as exc:  # noqa: BLE001 - an unknown language, ...: whatever a row holds, the list shows it
        return Subject(row.subject, type(exc).__name__)
    return Subject(" ".join(text.split()))  # one line, as the subject header is; a plain str


def line(row: Notification) -> SafeString:
    """The list's line for `row`'s subject: rendered when `render_page` rendered it, its text
    marked when it could not be, and the text as it is otherwise."""
    shown = getattr(row, SHOWN, None)
    if shown is None:
        return display.clip(" ".join(row.subject.split()))
    if not shown.problem:
        return display.clip(shown.text)
    text = " ".join(shown.text.split())
    hover = gettext("Not rendered (%(problem)s): %(template)s") % {"problem": shown.problem, "template": text}
    return format_html(
        '<span class="nq-clip nq-unrendered" title="{}"><span class="nq-quiet">{}</span> {}</span>',
        hover,
        gettext("(not rendered)"),
        text,
    )


def files_label(row: Notification) -> str:
    """`(template) reminders/invoice`: a row whose subject comes from the site's template files."""
    return f"{gettext('(template)')} {row.template}"
