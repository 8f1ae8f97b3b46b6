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

A file's storage name is generated (a random prefix and an ASCII form of its name, never
a `..`); the name the recipient sees is the one given (`"Q1..Q2 report.pdf"`, `".."`,
`"📎"`), kept in `name`. A file storage must keep its files at an absolute path: under a
relative one (an unset MEDIA_ROOT is the working directory) a tick started by cron from
another directory looks elsewhere (`notifications.W028`; `relative_location()`): the tick
holds email with attachments until it is absolute (`storage_problem()`).

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

import email
import email.policy
import errno
import logging
import mimetypes
import os
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import Message
from typing import Any, cast

from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.db import transaction

from notifications.conf import attachment_storage, max_attachment_bytes

KINDS = ("file", "part")
DIRECTORY = "notifications/attachments"
MAX_ATTACHMENTS = 100
MAX_NAME_CHARS = 200
DEFAULT_MIMETYPE = "application/octet-stream"
STORAGE_NAME_CHARS = 80  # of the ASCII form of a name kept in its file's storage name

logger = logging.getLogger("notifications.attachments")


class NotStored(OSError):
    """An attachment could not be written to storage (a full disk, storage down); nothing of
    it is left behind. The message names the attachment and the storage, never its content."""


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


def relative_location(target: Storage | None = None) -> str | None:
    """The location of a file storage (FileSystemStorage or a subclass) that is relative to
    the working directory (`""` when unset, i.e. MEDIA_ROOT empty); None for an absolute one
    or another kind of storage. Each process then reads and writes under its own working
    directory: a tick started by cron from $HOME does not find what the site stored."""
    target = storage() if target is None else target
    if not isinstance(target, FileSystemStorage):
        return None
    location = os.fspath(target.base_location or "")
    return None if os.path.isabs(location) else location


def storage_problem() -> str | None:
    """Why attachments cannot be read reliably where this process would read them, or None:
    `NOTIFICATIONS_ATTACHMENT_STORAGE` names no usable storage (notifications.W024), or a
    file storage whose location is relative or unset (W028), which each process resolves
    against its own working directory. The reason names the absolute folder this process
    would read (never a file's content). The tick holds email with attachments meanwhile."""
    alias = attachment_storage()
    try:
        target = storages[alias]
    except Exception as exc:  # noqa: BLE001 - an unknown alias, or a storage that cannot be built
        return f"NOTIFICATIONS_ATTACHMENT_STORAGE names {alias!r}, which is not a usable storage ({type(exc).__name__})"
    relative = relative_location(target)
    if relative is None:
        return None
    where = os.path.join(os.path.abspath(relative), DIRECTORY)
    state = f"is {relative!r}, a relative path" if relative else "is unset"
    return f"{location_setting(alias)} {state}, so attachments would be read from {where} (this process's directory)"


def location_setting(alias: str | None = None) -> str:
    """The setting that places the file storage `alias` (default: the attachments'): its
    OPTIONS' `location` in STORAGES when given, else MEDIA_ROOT."""
    alias = attachment_storage() if alias is None else alias
    config: dict[str, Any] = cast(dict[str, Any], storages.backends.get(alias)) or {}  # a configuration
    options = config.get("OPTIONS") or {}
    if isinstance(options, dict) and "location" in options:
        return f"STORAGES[{alias!r}]['OPTIONS']['location']"
    return "MEDIA_ROOT"


def storage_name(name: str) -> str:
    """A new storage name for a file whose display name is `name`: a random prefix and the
    name's ASCII letters, digits, `-`, `_` and single dots (no `..`, no path), so that any
    name Django's backends send can be stored; the display name is kept on the row."""
    ascii_name = re.sub(r"[^A-Za-z0-9._-]+", "-", name)
    ascii_name = re.sub(r"\.{2,}", ".", ascii_name).strip(".-_")[:STORAGE_NAME_CHARS].strip(".-_")
    return f"{DIRECTORY}/{uuid.uuid4().hex}-{ascii_name or 'attachment'}"


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
            # One folder for all: a unique prefix, not a folder per file (none is left empty behind).
            path = _save(target, storage_name(p.name), p)
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


def _save(target: Storage, name: str, prepared: _Prepared) -> str:
    """Write one attachment under `name`; a write that fails part-way (a full disk) leaves no
    partial file behind and raises NotStored."""
    try:
        return target.save(name, ContentFile(prepared.data))
    except Exception as exc:
        _remove_partial(target, name)
        reason = describe_failure(exc)
        raise NotStored(
            getattr(exc, "errno", None) or errno.EIO,
            f"The attachment {prepared.name[:60]!r} could not be stored in the storage "
            f"{attachment_storage()!r} ({reason}); nothing of it was kept.",
        ) from exc


def _remove_partial(target: Storage, name: str) -> None:
    try:
        if target.exists(name):
            target.delete(name)
    except Exception as exc:  # noqa: BLE001 - logged: the original failure is what the caller hears of
        _log_failed_delete(name, exc)


def describe_failure(exc: BaseException) -> str:
    """An exception as its type and, for an OSError, its errno name and text (never a path)."""
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and isinstance(code, int):
        return f"{type(exc).__name__}: {errno.errorcode.get(code, code)} {os.strerror(code)}"
    return type(exc).__name__


def _log_failed_delete(name: str, exc: BaseException) -> None:
    logger.warning(
        "could not delete the attachment file %s from the storage %r (%s); it stays behind",
        name,
        attachment_storage(),
        describe_failure(exc),
    )


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
    if not isinstance(filename, str) or not filename or any(c in filename for c in "\r\n\x00"):
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
    """A MIME part kept whole: its bytes as they would go out (a forwarded message,
    `MIMEMessage`, or any multipart part, with what it holds)."""
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
        try:
            target = storage()
        except Exception as exc:  # noqa: BLE001 - the rows are gone either way; said in the log
            for name in names:
                _log_failed_delete(name, exc)
            return
        for name in names:
            try:
                target.delete(name)
            except Exception as exc:  # noqa: BLE001 - storage down: the row is gone either way; said in the log
                _log_failed_delete(name, exc)

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
