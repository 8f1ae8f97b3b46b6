"""What the email channel asks of a row's own fields (`EmailAnswers.row_errors`).

Recipients, the sender, headers, language, and the message: subject, body and html_body
(templates rendered with the payload at send time), or `template`, a prefix of the site's
template files, or a message queued by `QueuedEmailBackend` (sent as it is).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from notifications.content import email as email_content
from notifications.content.templating import template_errors
from notifications.models import addresses
from notifications.models.validation import Errors, body_errors
from notifications.rules import headers as header_rules

if TYPE_CHECKING:
    from notifications.models import Notification

# UTF-8 bytes of a queued message's text (its body and every alternative together): sent as
# it is, never parsed as a template, so it may be far longer than a template body.
MAX_MESSAGE_BYTES = 2 * 1024 * 1024


def row_errors(row: Notification) -> Errors:
    """Every problem of `row` for the email channel, by field (empty lists: none)."""
    has_copies = bool(addresses.as_list(row.email_cc) or addresses.as_list(row.email_bcc))
    errors: Errors = {
        "email_to": addresses.errors(row.email_to, single=True, required=not has_copies),
        "email_cc": addresses.errors(row.email_cc, single=False),
        "email_bcc": addresses.errors(row.email_bcc, single=False),
        "reply_to": addresses.errors(row.reply_to, single=False),
    }
    if not any(errors.values()):
        errors["email_to"] = addresses.too_many(row.email_to, row.email_cc, row.email_bcc)
    if row.from_email and not addresses.is_valid(row.from_email):
        errors["from_email"] = [
            f"Enter a valid address, e.g. Billing <billing@example.com>, not {row.from_email[:80]!r}."
        ]
    errors["headers"] = header_rules.errors(row.headers)
    if row.language:
        errors["language"] = email_content.language_errors(row.language)
    if row.message is not None:
        errors["body"] = message_errors(row)
        return errors
    if row.template:
        errors["template"] = email_content.template_field_errors(row.template)
        for name in ("subject", "body", "html_body"):
            if getattr(row, name):
                errors[name] = ["Leave this blank: the template's files give the message."]
        return errors
    # An oversized body is not worth parsing as a template.
    errors["subject"] = template_errors(row.subject or "")
    errors["body"] = body_errors(row.body or "") or template_errors(row.body or "")
    errors["html_body"] = body_errors(row.html_body or "") or template_errors(row.html_body or "")
    return errors


def message_errors(row: Notification) -> list[str]:
    """A message queued by QueuedEmailBackend: its extras are an object, its text bounded."""
    extras = row.message
    alternatives = extras.get("alternatives", []) if isinstance(extras, dict) else None
    if not isinstance(alternatives, list) or not all(
        isinstance(a, dict) and isinstance(a.get("mimetype"), str) for a in alternatives
    ):
        return ["This row's queued message is malformed (its alternatives are not a list of parts)."]
    # surrogatepass: a lone surrogate is refused on its field (`storable_errors`), not here.
    size = len((row.body or "").encode("utf-8", "surrogatepass"))
    for alternative in alternatives:
        content = alternative.get("content")
        size += len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else len(str(content))
    if size > MAX_MESSAGE_BYTES:
        return [f"The message's text is larger than {MAX_MESSAGE_BYTES:,} bytes."]
    return []
