"""What an email says: its subject, text body and HTML body, rendered with the row's payload.

Three kinds of row:

- The row carries templates (`subject`, `body`, optional `html_body`): written by host code
  and by staff in the admin, they render with the restricted engine of
  `notifications.content.templating` (an allow-list of tags and filters, bounded work).
- `template` names a prefix of the site's template files: `<prefix>/subject.txt`,
  `<prefix>/body.txt` and, if it exists, `<prefix>/body.html`. Those files are the site's
  own code, so they render with the site's own template engine (`TEMPLATES`: its loaders,
  libraries and options): `{% extends %}`, `{% include %}`, `{% load %}` of any library,
  every tag and filter the site has; i18n's tags are built in, as they always were for
  notification templates. Text parts render without escaping, the HTML part escapes the
  payload's values.
- A message queued by `QueuedEmailBackend` (`message` is set): its subject and body are
  sent as they are; nothing is rendered.

`language` (a code from `settings.LANGUAGES`) is active while a row renders, in both
engines (`{% get_current_language as LANG %}` works in both).

This module imports nothing from the app but the template engine, so validation and the
email channel share it.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.template import Context, Engine, Template, TemplateDoesNotExist, TemplateSyntaxError, engines
from django.template.backends.django import DjangoTemplates
from django.utils import translation

from notifications.content.templating import TemplateRenderError, render

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


# --- the site's template files --------------------------------------------------------------


def prefix_errors(prefix: str) -> list[str]:
    if not PREFIX_PATTERN.fullmatch(prefix):
        return [
            "Give a template prefix such as reminders/invoice: names of letters, digits, "
            "'_', '-' and '.', separated by '/'."
        ]
    return []


# The engines a site's template files render with: each of the site's Django engines
# (`TEMPLATES`: its loaders, libraries, builtins and options) with i18n's tags built in too,
# as notification templates have always had them. Keyed by the site's engine, which Django
# builds anew when TEMPLATES changes.
_SIBLINGS: dict[int, tuple[Engine, Engine]] = {}
_SIBLINGS_LOCK = threading.Lock()
I18N_LIBRARY = "django.templatetags.i18n"


def _sibling(engine: Engine) -> Engine:
    with _SIBLINGS_LOCK:
        known = _SIBLINGS.get(id(engine))
        if known is not None and known[0] is engine:
            return known[1]
        sibling = Engine(
            dirs=engine.dirs,
            app_dirs=False,  # its loaders say where to look: engine.loaders includes the app directories
            context_processors=engine.context_processors,
            debug=engine.debug,
            loaders=engine.loaders,
            string_if_invalid=engine.string_if_invalid,
            file_charset=engine.file_charset,
            libraries=engine.libraries,
            builtins=[*engine.builtins, I18N_LIBRARY] if I18N_LIBRARY not in engine.builtins else engine.builtins,
            autoescape=engine.autoescape,
        )
        _SIBLINGS[id(engine)] = (engine, sibling)
        return sibling


def site_engines() -> list[Any]:
    """What a site's template file is looked up in: its Django engines (see `_sibling`), then any other."""
    found: list[Any] = []
    for backend in engines.all():
        found.append(_sibling(backend.engine) if isinstance(backend, DjangoTemplates) else backend)
    return found


def _site_template(name: str, *, required: bool) -> Any:
    """The site's compiled template `name` (its engines, in the order of TEMPLATES), or None."""
    for engine in site_engines():
        try:
            return engine.get_template(name)
        except TemplateDoesNotExist as exc:
            if exc.args and exc.args[0] != name:  # a file it extends or includes is missing
                missing = str(exc.args[0])[:200]
                raise TemplateRenderError(f"{name}: no template {missing} among the site's templates") from None
            continue
        except TemplateSyntaxError as exc:
            raise TemplateRenderError(f"{name}: {exc}") from None
    if required:
        raise TemplateRenderError(f"no template {name} among the site's templates")
    return None


@dataclass(frozen=True)
class SiteTemplates:
    subject: Any
    body: Any
    html: Any  # None without body.html


def find_templates(prefix: str) -> SiteTemplates:
    """The three files of `prefix`, compiled; raises TemplateRenderError naming a required
    one missing or a file that does not compile."""
    return SiteTemplates(
        _site_template(f"{prefix}/{SUBJECT_FILE}", required=True),
        _site_template(f"{prefix}/{BODY_FILE}", required=True),
        _site_template(f"{prefix}/{HTML_FILE}", required=False),
    )


def template_field_errors(prefix: str) -> list[str]:
    """Why `prefix` cannot be a row's `template`: malformed, a required file missing, a file that does not compile."""
    problems = prefix_errors(prefix)
    if problems:
        return problems
    try:
        find_templates(prefix)
    except TemplateRenderError as exc:
        return [_sentence(str(exc))]
    return []


def render_site_template(template: Any, payload: Mapping[str, Any], *, autoescape: bool) -> str:
    """Render one of the site's templates with `payload` as its context.

    A Django template renders in a plain Context (no request, so no context processors),
    escaping only if `autoescape`; a template of another engine (Jinja2) renders with its
    own escaping rules. Raises TemplateRenderError naming the exception's type (its message
    may quote the payload).
    """
    try:
        if isinstance(template, Template):
            return str(template.render(Context(dict(payload), autoescape=autoescape)))
        return str(template.render(dict(payload)))
    except TemplateRenderError:
        raise
    except TemplateDoesNotExist as exc:  # a file it extends or includes
        raise TemplateRenderError(f"no template {str(exc.args[0])[:200]} among the site's templates") from None
    except Exception as exc:  # noqa: BLE001 - the site's code failed: name the type only
        name = getattr(getattr(template, "origin", None), "template_name", "a template")
        raise TemplateRenderError(f"{type(exc).__name__} while rendering {name}") from None


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


def render_content(row: Row, extra: Mapping[str, Any] | None = None) -> Content:
    """The row's email, rendered with its payload in its language (a digest's row: also
    `items`, every row's payload oldest first, and `count`); `extra` (the message's links:
    `unsubscribe_url`, `preferences_url`) is seen by the templates too, over the payload.

    Raises TemplateRenderError (a refused template, a limit reached, a template file gone
    or failing).
    """
    payload: Mapping[str, Any] = row.payload if isinstance(row.payload, dict) else {}
    group = getattr(row, "digest_rows", ())
    if group:  # a digest: the first row's message, with every row's payload
        payload = {**payload, "items": [each.payload for each in group], "count": len(group)}
    if extra:
        payload = {**payload, **extra}
    if getattr(row, "message", None) is not None:  # queued by QueuedEmailBackend: sent as it is
        return Content(" ".join((row.subject or "").split())[:MAX_SUBJECT_CHARS], row.body or "", None)
    with language_active(row.language):
        if row.template:
            templates = find_templates(row.template)
            subject = render_site_template(templates.subject, payload, autoescape=False)
            body = render_site_template(templates.body, payload, autoescape=False)
            html = render_site_template(templates.html, payload, autoescape=True) if templates.html else None
        else:
            subject = render(row.subject or "", payload)
            body = render(row.body or "", payload)
            html = render(row.html_body, payload, autoescape=True) if row.html_body else None
    # A header is one line: line breaks a template leaves (a trailing newline in
    # subject.txt) become spaces.
    subject = " ".join(subject.split())[:MAX_SUBJECT_CHARS]
    return Content(subject, body, html)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
