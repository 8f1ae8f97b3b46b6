"""A row's attachments: their content kept through Django's storage API, a list of them on the row.

The row's `attachments` column holds one small JSON object per attachment (what the admin
lists and the tick needs to rebuild it) and never the content:

    {"name": "invoice-7.pdf", "mimetype": "application/pdf", "size": 48213,
     "file": "notifications/attachments/<hex>-invoice-7.pdf", "kind": "file", "content_id": null}

The content is a file in the storage `NOTIFICATIONS_ATTACHMENT_STORAGE` names among the
site's `STORAGES` (default: `"default"`, i.e. MEDIA_ROOT, or S3 or whatever the site keeps
its files in). `kind` is `"file"` for a name, content and type (Django's
`EmailMessage.attach(filename, content, mimetype)`), or `"part"` for a whole MIME part
(`attach(MIMEBase)`; an inline image with its `Content-ID`): then the file is the part
as bytes, headers and all, and it goes out as it came in.

At most `NOTIFICATIONS_MAX_ATTACHMENT_BYTES` (10 MiB by default) of content per row,
checked before anything is written. Files are deleted with their row, however it goes:
delivered (a one-shot row), purged, cancelled, replaced by `schedule(on_conflict="replace")`
or deleted in the admin; always after the deleting transaction commits, so a rollback
loses nothing. A row inserted and then rolled back by the caller leaves its files behind
(storage is not transactional); the queued email backend creates rows only once the
caller's transaction has committed.

`calendar_event()` makes an `.ics` invitation to attach to a reminder.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import mimetypes
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import Message
from typing import Any

from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db import transaction
from django.utils.text import get_valid_filename

from notifications.conf import attachment_storage, max_attachment_bytes

KINDS = ("file", "part")
DIRECTORY = "notifications/attachments"
MAX_ATTACHMENTS = 100
MAX_NAME_CHARS = 200
DEFAULT_MIMETYPE = "application/octet-stream"


@dataclass(frozen=True)
class Attachment:
    """One attachment given to `schedule(attachments=[...])`.

    `content` is bytes (or text, sent as UTF-8). With a `content_id` (`"<logo@example.com>"`
    or without the brackets) it goes out inline, for `<img src="cid:logo@example.com">` in
    the HTML body. `mimetype` defaults to what the name suggests.
    """

    filename: str
    content: bytes | str
    mimetype: str | None = None
    content_id: str | None = None


def storage() -> Storage:
    """The storage attachments are kept in (NOTIFICATIONS_ATTACHMENT_STORAGE among STORAGES)."""
    return storages[attachment_storage()]


# --- what a row stores ---------------------------------------------------------------------


def describe_errors(value: Any) -> list[str]:
    """Why `value` cannot be a row's `attachments` (the stored list); empty when it can."""
    if not isinstance(value, list):
        return ["Give a list of attachments."]
    too_many = _limit_errors(len(value), 0)  # before reading each item of a huge list
    if too_many:
        return too_many
    for item in value:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("mimetype"), str)
            and isinstance(item.get("file"), str)
            and item["file"].startswith(f"{DIRECTORY}/")
            and ".." not in item["file"]
            and item.get("kind") in KINDS
            and isinstance(item.get("size"), int)
            and not isinstance(item.get("size"), bool)
            and item["size"] >= 0
            and (item.get("content_id") is None or isinstance(item.get("content_id"), str))
        ):
            return ["Attachments are given to schedule(attachments=[...]); this list is not one it stored."]
    return _limit_errors(len(value), sum(item["size"] for item in value))


def _limit_errors(count: int, total: int) -> list[str]:
    """Why `count` attachments holding `total` bytes are more than a row may carry; empty
    when they are not."""
    if count > MAX_ATTACHMENTS:
        return [f"At most {MAX_ATTACHMENTS} attachments, not {count}."]
    limit = max_attachment_bytes()
    if total > limit:
        return [
            f"The attachments hold {total:,} bytes, more than the {limit:,} a notification may carry "
            "(NOTIFICATIONS_MAX_ATTACHMENT_BYTES)."
        ]
    return []


def stored(value: Any) -> list[dict[str, Any]]:
    """The stored attachments of a row's value (nothing for a value that is not a list of them)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict) and isinstance(item.get("file"), str)]


def total_size(value: Any) -> int:
    return sum(item.get("size", 0) for item in stored(value) if isinstance(item.get("size"), int))


# --- storing -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    name: str
    mimetype: str
    kind: str
    data: bytes  # what is written to storage
    size: int  # bytes of content
    content_id: str | None


def store(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Write each attachment's content to storage; returns the list a row stores.

    Takes `Attachment`s, `(filename, content, mimetype)` tuples (Django's `EmailAttachment`
    among them), MIME parts (`email.mime` or `email.message.MIMEPart`) and lists already
    stored (kept as they are). Raises ValidationError on `attachments` (nothing written)
    when one is not an attachment or together they are over the limits.
    """
    kept, prepared = _checked(items)
    written: list[dict[str, Any]] = []
    target = storage()
    try:
        for p in prepared:
            safe = get_valid_filename(p.name)[:MAX_NAME_CHARS] if p.name else ""
            # One folder for all: a unique prefix, not a folder per file (none is left empty behind).
            path = target.save(f"{DIRECTORY}/{uuid.uuid4().hex}-{safe or 'attachment'}", ContentFile(p.data))
            written.append(
                {
                    "name": p.name,
                    "mimetype": p.mimetype,
                    "size": p.size,
                    "file": path,
                    "kind": p.kind,
                    "content_id": p.content_id,
                }
            )
    except BaseException:
        delete_files(written, at_once=True)
        raise
    return kept + written


def validate(items: Iterable[Any]) -> None:
    """Raise the ValidationError `store` would raise for `items`, writing nothing: a
    message `QueuedEmailBackend` cannot queue is refused when it is sent, not later, when
    the caller's transaction commits."""
    _checked(items)


def _checked(items: Iterable[Any]) -> tuple[list[dict[str, Any]], list[_Prepared]]:
    """`items` as the lists already stored and those to store; ValidationError on
    `attachments` when one is not an attachment or together they are over the limits."""
    kept: list[dict[str, Any]] = []
    prepared: list[_Prepared] = []
    for item in items:
        if isinstance(item, dict):
            kept.append(item)
        else:
            prepared.append(_prepare(item))
    errors = _limit_errors(len(kept) + len(prepared), sum(p.size for p in prepared) + total_size(kept))
    if errors:
        raise ValidationError({"attachments": errors})
    return kept, prepared


def _prepare(item: Any) -> _Prepared:
    if isinstance(item, Message):
        return _prepare_part(item)
    if isinstance(item, Attachment):
        filename, content, mimetype, content_id = item.filename, item.content, item.mimetype, item.content_id
    elif isinstance(item, Sequence) and not isinstance(item, str | bytes) and len(item) == 3:
        filename, content, mimetype = item
        content_id = None
    else:
        raise ValidationError(
            {
                "attachments": [
                    "Give Attachment(filename, content, mimetype), (filename, content, mimetype) or a MIME part."
                ]
            }
        )
    if not isinstance(filename, str) or not filename.strip() or any(c in filename for c in "\r\n\x00"):
        raise ValidationError({"attachments": ["An attachment needs a file name (one line)."]})
    if isinstance(content, str):
        data = content.encode()
    elif isinstance(content, bytes | bytearray | memoryview):
        data = bytes(content)
    else:
        raise ValidationError({"attachments": [f"The content of {filename[:40]!r} must be bytes or text."]})
    mimetype = mimetype or mimetypes.guess_type(filename)[0] or DEFAULT_MIMETYPE
    if not isinstance(mimetype, str) or "/" not in mimetype or any(c in mimetype for c in "\r\n\x00"):
        raise ValidationError({"attachments": [f"The type of {filename[:40]!r} is not a MIME type."]})
    if content_id is None:
        return _Prepared(filename[:MAX_NAME_CHARS], mimetype, "file", data, len(data), None)
    # An inline attachment is a MIME part with its Content-ID: build it here, send it as it is.
    part = _inline_part(filename, data, mimetype, content_id)
    return _prepare_part(part)


def _inline_part(filename: str, data: bytes, mimetype: str, content_id: str) -> Message:
    from email.message import MIMEPart

    cid = content_id.strip().strip("<>")
    if not cid or any(c in cid for c in "\r\n\x00<> "):
        raise ValidationError({"attachments": [f"The Content-ID of {filename[:40]!r} is not one."]})
    maintype, _, subtype = mimetype.partition("/")
    part = MIMEPart(policy=email.policy.default)
    part.set_content(data, maintype=maintype, subtype=subtype, disposition="inline", filename=filename, cid=f"<{cid}>")
    return part


def _prepare_part(part: Message) -> _Prepared:
    """A MIME part kept whole: its bytes as they would go out."""
    if part.is_multipart():
        raise ValidationError({"attachments": ["A multipart MIME part cannot be an attachment here."]})
    data = part.as_bytes()
    payload = part.get_payload(decode=True)
    size = len(payload) if isinstance(payload, bytes) else len(data)
    name = part.get_filename() or ""
    content_id = part.get("Content-ID")
    return _Prepared(
        str(name)[:MAX_NAME_CHARS], part.get_content_type(), "part", data, size, str(content_id) if content_id else None
    )


# --- reading and deleting --------------------------------------------------------------------


def read(item: dict[str, Any]) -> bytes:
    """The stored bytes of one attachment (for a part: the part, headers and all)."""
    with storage().open(item["file"], "rb") as handle:
        data: bytes = handle.read()
    return data


def read_content(item: dict[str, Any]) -> bytes:
    """The content of one attachment as its recipient saves it (a part's payload, decoded)."""
    data = read(item)
    if item.get("kind") != "part":
        return data
    payload = email.message_from_bytes(data, policy=email.policy.default).get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def delete_files(items: Iterable[dict[str, Any]], *, at_once: bool = False) -> None:
    """Delete the stored content of `items`, once the current transaction commits (or now)."""
    names = [item["file"] for item in items if isinstance(item, dict) and isinstance(item.get("file"), str)]
    if not names:
        return

    def delete() -> None:
        target = storage()
        for name in names:
            # A file already gone, or storage down: the row is gone either way.
            with contextlib.suppress(Exception):
                target.delete(name)

    if at_once:
        delete()
    else:
        transaction.on_commit(delete)


# --- an .ics invitation ---------------------------------------------------------------------


def calendar_event(
    summary: str,
    start: datetime,
    end: datetime | None = None,
    *,
    description: str = "",
    location: str = "",
    uid: str | None = None,
    url: str = "",
    filename: str = "invite.ics",
) -> Attachment:
    """An RFC 5545 calendar event as an `.ics` attachment (`text/calendar`), for a reminder:

        schedule(email_to="ada@example.com", subject="Dentist tomorrow", body="...",
                 attachments=[calendar_event("Dentist", start, start + timedelta(minutes=30))])

    Times are aware datetimes, written in UTC. `end` defaults to an hour after `start`. Give
    the same `uid` to an updated event so calendars replace it instead of adding another.
    """
    if start.tzinfo is None or (end is not None and end.tzinfo is None):
        raise ValueError("calendar_event() takes aware datetimes")
    end = end or start + timedelta(hours=1)
    stamp = datetime.now(UTC)
    lines = [
        "BEGIN:VCALENDAR",
        "VERSION:2.0",
        "PRODID:-//notifications//reminder//EN",
        "CALSCALE:GREGORIAN",
        "METHOD:PUBLISH",
        "BEGIN:VEVENT",
        f"UID:{_ics_text(uid or f'{uuid.uuid4()}@notifications')}",
        f"DTSTAMP:{_ics_time(stamp)}",
        f"DTSTART:{_ics_time(start)}",
        f"DTEND:{_ics_time(end)}",
        f"SUMMARY:{_ics_text(summary)}",
    ]
    if description:
        lines.append(f"DESCRIPTION:{_ics_text(description)}")
    if location:
        lines.append(f"LOCATION:{_ics_text(location)}")
    if url:
        lines.append(f"URL:{_ics_text(url)}")
    lines += ["END:VEVENT", "END:VCALENDAR"]
    text = "".join(_fold(line) + "\r\n" for line in lines)
    return Attachment(filename, text.encode(), "text/calendar")


def _ics_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _ics_text(value: str) -> str:
    """RFC 5545 TEXT: backslashes, semicolons and commas escaped, line breaks as \\n."""
    value = value.replace("\\", "\\\\").replace(";", "\\;").replace(",", "\\,")
    return value.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")


def _fold(line: str) -> str:
    """Lines longer than 75 octets continue on the next line after a space (RFC 5545 3.1)."""
    data = line.encode()
    if len(data) <= 75:
        return line
    parts: list[bytes] = []
    current = b""
    for char in line:
        encoded = char.encode()
        if len(current) + len(encoded) > (75 if not parts else 74):
            parts.append(current)
            current = b""
        current += encoded
    parts.append(current)
    return "\r\n ".join(p.decode() for p in parts)
