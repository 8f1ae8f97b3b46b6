"""What an email says: its subject, text body and HTML body, rendered with the row's payload.

Either the row carries them (`subject`, `body`, optional `html_body`) or `template` names a
prefix of the site's templates: `<prefix>/subject.txt`, `<prefix>/body.txt` and, if it
exists, `<prefix>/body.html`. The site's template loaders find those files (so they live
with the site's other templates, in an app's `templates/` or in `DIRS`); their text is
rendered by the restricted engine of `notifications.content.templating`, like a row's own, so one
set of rules and limits holds for every notification template. Text parts render without
escaping; the HTML part escapes the payload's values.

`language` (a code from `settings.LANGUAGES`) is active while a row renders.

This module imports nothing from the app but the template engine, so validation and the
email channel share it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.template import TemplateDoesNotExist, engines
from django.template.backends.django import DjangoTemplates
from django.utils import translation

from notifications.content.templating import TemplateRenderError, render, template_errors

SUBJECT_FILE = "subject.txt"
BODY_FILE = "body.txt"
HTML_FILE = "body.html"  # optional
# A prefix is a relative path of plain names: no `..`, no leading `/` or `.`, nothing a
# loader could resolve outside its directories.
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
MAX_SUBJECT_CHARS = 998  # RFC 5322's line limit: a longer rendered subject is cut there


class Row(Protocol):
    """The fields of a Notification this module reads."""

    subject: str
    body: str
    html_body: str
    template: str
    language: str
    payload: Any


@dataclass(frozen=True)
class Content:
    """A rendered email: subject, plain-text body, and the HTML alternative or None."""

    subject: str
    body: str
    html: str | None


# --- finding the files -------------------------------------------------------------------


def template_source(name: str) -> str | None:
    """The text of template `name` as the site's Django template loaders find it, or None.

    The loaders only find and read the file (in the order the site's TEMPLATES give);
    it is never compiled by the site's engine.
    """
    for backend in engines.all():
        if not isinstance(backend, DjangoTemplates):
            continue
        for loader in backend.engine.template_loaders:
            for origin in loader.get_template_sources(name):
                try:
                    return str(loader.get_contents(origin))  # type: ignore[attr-defined]  # every loader has it
                except TemplateDoesNotExist:
                    continue
    return None


@dataclass(frozen=True)
class Sources:
    subject: str
    body: str
    html: str | None


def prefix_errors(prefix: str) -> list[str]:
    if not PREFIX_PATTERN.fullmatch(prefix):
        return [
            "Give a template prefix such as reminders/invoice: names of letters, digits, "
            "'_', '-' and '.', separated by '/'."
        ]
    return []


def find_sources(prefix: str) -> Sources:
    """The three files of `prefix`; raises TemplateRenderError naming a required one missing."""
    texts: dict[str, str | None] = {}
    for filename in (SUBJECT_FILE, BODY_FILE, HTML_FILE):
        texts[filename] = template_source(f"{prefix}/{filename}")
        if texts[filename] is None and filename != HTML_FILE:
            raise TemplateRenderError(f"no template {prefix}/{filename} among the site's templates")
    return Sources(texts[SUBJECT_FILE] or "", texts[BODY_FILE] or "", texts[HTML_FILE])


def template_field_errors(prefix: str) -> list[str]:
    """Why `prefix` cannot be a row's `template`: malformed, a required file missing, a refused template."""
    problems = prefix_errors(prefix)
    if problems:
        return problems
    try:
        sources = find_sources(prefix)
    except TemplateRenderError as exc:
        return [_sentence(str(exc))]
    problems = []
    for filename, text in ((SUBJECT_FILE, sources.subject), (BODY_FILE, sources.body), (HTML_FILE, sources.html)):
        for message in template_errors(text or ""):
            problems.append(f"{prefix}/{filename}: {message}")
    return problems


# --- language ------------------------------------------------------------------------------


def language_errors(code: str) -> list[str]:
    codes = [c for c, _ in settings.LANGUAGES]
    if code in codes:
        return []
    shown = ", ".join(codes[:8]) + (", ..." if len(codes) > 8 else "")
    return [f"Unknown language {code[:20]!r}: use a code from the site's LANGUAGES ({shown})."]


@contextlib.contextmanager
def language_active(code: str) -> Iterator[None]:
    """`code` active in this thread for the block (nothing changes for a blank one)."""
    if not code:
        yield
        return
    with translation.override(code):
        yield


# --- rendering -----------------------------------------------------------------------------


def render_content(row: Row) -> Content:
    """The row's email, rendered with its payload in its language.

    Raises TemplateRenderError (a refused template, a limit reached, a template file gone).
    """
    payload: Mapping[str, Any] = row.payload if isinstance(row.payload, dict) else {}
    if row.template:
        sources = find_sources(row.template)
        subject_text, body_text, html_text = sources.subject, sources.body, sources.html
    else:
        subject_text, body_text, html_text = row.subject or "", row.body or "", row.html_body or None
    with language_active(row.language):
        subject = render(subject_text, payload)
        body = render(body_text, payload)
        html = render(html_text, payload, autoescape=True) if html_text else None
    # A header is one line: line breaks a template leaves (a trailing newline in
    # subject.txt) become spaces.
    subject = " ".join(subject.split())[:MAX_SUBJECT_CHARS]
    return Content(subject, body, html)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
