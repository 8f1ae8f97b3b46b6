"""What a request holds and what an answer says: ninja validates requests with these and
writes the OpenAPI document from them. They give each field's JSON type only; the rules
of a row are schedule()'s (`notifications.services.creating.prepare`).

A request's schemas are plain pydantic models, not ninja's `Schema`: that one wraps every
object it validates to read Django models' attributes, which requests never hold, and
made a batch of 1,000 rows twenty times slower to validate (90 ms against 4 ms)."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Schema
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from notifications.models.states import State

Addresses = str | list[str]
OnConflict = Literal["error", "replace", "keep"]


class AttachmentIn(BaseModel):
    """A file attached to an email: its content base64-encoded."""

    model_config = ConfigDict(extra="forbid")

    filename: str
    content: str = Field(description="the file's bytes, base64 (RFC 4648)")
    mimetype: str = ""


class NotificationIn(BaseModel):
    """schedule()'s keyword arguments; a field left out takes schedule()'s default."""

    model_config = ConfigDict(extra="forbid")

    channels: list[str] | None = None
    email_to: Addresses | None = None
    email_cc: Addresses | None = None
    email_bcc: Addresses | None = None
    reply_to: Addresses | None = None
    subject: str | None = None
    body: str | None = None
    html_body: str | None = None
    template: str | None = None
    language: str | None = None
    from_email: str | None = None
    headers: dict[str, str] | None = None
    mailer: str | None = None
    priority: str | None = None
    webhook_url: str | None = None
    webhook_secret: str | None = Field(default=None, description="write-only: never returned")
    payload: Any = None
    channel_data: dict[str, Any] | None = Field(default=None, description="write-only: never returned")
    routing: str | None = None
    recurrence_rule: str | None = None
    timezone: str | None = None
    expires_at: AwareDatetime | None = None
    max_delay: int | None = None
    quiet_hours: str | None = None
    max_retries: int | None = None
    backoff: Any = None
    recipient: str | None = None
    category: str | None = None
    digest_key: str | None = None
    digest_window: int | None = None
    escalate_after: int | None = None
    escalate_to: list[str] | None = None
    escalate_unless: str | None = None
    attachments: list[AttachmentIn] | None = None
    fire_at: AwareDatetime | None = None
    key: str | None = None
    on_conflict: OnConflict | None = None


class BatchIn(BaseModel):
    """schedule_many()'s arguments: the rows, and the batch's `on_conflict`."""

    model_config = ConfigDict(extra="forbid")

    rows: list[NotificationIn]
    on_conflict: OnConflict = "error"


class CreatedOut(Schema):
    id: int
    key: str
    state: State
    next_fire_at: AwareDatetime | None


class BatchOut(Schema):
    ids: list[int]


class NotificationOut(Schema):
    """A row as the API shows it: never a secret (`webhook_secret`, `channel_data`)."""

    id: int
    key: str
    state: State
    channels: list[Any]
    category: str
    recipient: str
    next_fire_at: AwareDatetime | None
    error_count: int
    last_error: str


class ProblemOut(Schema):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    status: int
    title: str
    detail: str
    errors: dict[str, list[str]] | None = None
