"""The API's operations (SPEC version 5, "The HTTP API"). Each one authenticates through
`auth.TokenAuth(scope)`, validates its body's JSON types through `schemas`, and hands
the rest to the services every other way in uses: `schedule_notification`,
`schedule_many`, `cancel`, `pause`, `resume`, `run_now`.

`id` in a path is the row's primary key. Reading any row needs the `read` scope, which
reads any row by key as well: a token is a service of the site, not a person, so a
guessable number opens nothing a token could not already read.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Status
from ninja.errors import HttpError
from ninja.errors import ValidationError as SchemaError

from notifications.conf import positive_int
from notifications.http_api import problems
from notifications.http_api.auth import TokenAuth
from notifications.http_api.idempotency import HEADER, MAX_KEY
from notifications.http_api.schemas import BatchIn, BatchOut, CreatedOut, NotificationIn, NotificationOut, ProblemOut
from notifications.models import Notification
from notifications.models.validation import KEY_TAKEN
from notifications.services import cancel, pause, pk_of, resume, run_now, schedule_many, schedule_notification

logger = logging.getLogger("notifications.http_api")
T = TypeVar("T")
MAX_ID = 2**63 - 1  # the largest primary key any database here holds: beyond it, no row


class Api(NinjaAPI):
    """ninja's API, its document also saying what `guard` adds around the operations:
    errors are `application/problem+json`, a POST takes an `Idempotency-Key` header, and
    a 409 or 429 says when to try again (`Retry-After`)."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        for operations in schema.get("paths", {}).values():
            for method, operation in operations.items():
                if method == "post":
                    operation.setdefault("parameters", []).append(IDEMPOTENCY_KEY)
                for status, answer in operation.get("responses", {}).items():
                    if int(status) >= 400 and "application/json" in answer.get("content", {}):
                        answer["content"] = {problems.CONTENT_TYPE: answer["content"]["application/json"]}
                    if int(status) in (409, 429):
                        answer["headers"] = {"Retry-After": RETRY_AFTER}
        return schema


IDEMPOTENCY_KEY = {
    "in": "header",
    "name": HEADER,
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY},
    "description": "A repeat with the same key and body within 24 hours replays the first answer "
    "and creates nothing (docs/api.md).",
}
RETRY_AFTER = {
    "schema": {"type": "integer", "minimum": 1},
    "description": "Seconds before trying again (a 409's only while an Idempotency-Key is in progress).",
}


api = Api(
    title="Notifications",
    version="1",
    description="Schedule, read and manage notifications from other services (docs/api.md).",
    openapi_url="/openapi.json",
    docs_url=None,
    urls_namespace="notifications:api",
)

TAGS = ["notifications"]  # one group: a generated client's module of operations
# The errors each kind of operation may answer (all problem details).
READ_ERRORS = frozenset({401, 403, 404, 405, 422, 429})
WRITE_ERRORS = READ_ERRORS | {400, 409, 413, 415}


@api.exception_handler(problems.Problem)
def _problem(request: HttpRequest, exc: problems.Problem) -> HttpResponse:
    return problems.of(exc)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    detail = "Give a valid bearer token." if exc.status_code == 401 else str(exc)
    return problems.response(exc.status_code, detail)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return problems.response(404, "No such notification.")


@api.exception_handler(SchemaError)
def _invalid(request: HttpRequest, exc: SchemaError) -> HttpResponse:
    errors: dict[str, list[str]] = {}
    for error in exc.errors:
        errors.setdefault(_field(error.get("loc", ())), []).append(str(error.get("msg", "Invalid.")))
    return problems.response(422, "Some fields are invalid.", errors)


@api.exception_handler(Exception)
def _crash(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("The HTTP API failed on %s %s", request.method, request.path)
    return problems.response(500, "The server failed; nothing was changed by this request's own statements.")


def _field(loc: Any) -> str:
    """A schema error's place as the API names fields: `email_to`, or a batch's `3.email_to`."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["body"]:
        parts = parts[2:]  # ("body", <parameter>, field, ...): the parameter's name is ninja's, not the API's
        if not parts:
            return "body"  # not a JSON object at all
        if parts[0] == "rows" and len(parts) >= 2:
            return ".".join(parts[1:3])  # `3.email_to`; `3` alone for a row that is not an object
        return parts[0]
    return parts[-1] if parts else "body"


def _validated(call: Callable[[], T]) -> T:
    """`call()`, its refusals as problems: a taken key 409, anything else invalid 422."""
    try:
        return call()
    except ValidationError as exc:
        errors = _messages(exc)
        taken = all(m == [KEY_TAKEN] for f, m in errors.items() if f == "key" or f.endswith(".key"))
        if taken and all(f == "key" or f.endswith(".key") for f in errors):
            raise problems.Problem(409, "The key is taken.", errors) from None
        raise problems.Problem(422, "Some fields are invalid.", errors) from None
    except (TypeError, ValueError) as exc:
        raise problems.Problem(422, str(exc), {"body": [str(exc)]}) from None


def _messages(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {field: [str(m) for m in messages] for field, messages in exc.message_dict.items()}
    return {"body": [str(m) for m in exc.messages]}


def _arguments(data: NotificationIn, field_prefix: str = "") -> dict[str, Any]:
    """schedule()'s keyword arguments from the JSON (attachments' content decoded)."""
    fields = data.model_dump(exclude_none=True)
    if "attachments" in fields:
        decoded = []
        for index, item in enumerate(fields["attachments"]):
            try:
                content = base64.b64decode(item["content"], validate=True)
            except (binascii.Error, ValueError):
                raise problems.Problem(
                    422,
                    "An attachment's content is not base64.",
                    {f"{field_prefix}attachments": [f"{index}: not base64."]},
                ) from None
            decoded.append((item["filename"], content, item["mimetype"] or None))
        fields["attachments"] = decoded
    return fields


def _row(pk: int) -> Notification:
    row = Notification.objects.filter(pk=pk).first() if 0 < pk <= MAX_ID else None
    if row is None:
        raise problems.Problem(404, "No such notification.")
    return row


def _shown(row: Notification) -> dict[str, Any]:
    """The row as the API shows it: never a secret."""
    return {
        "id": row.pk,
        "key": row.key,
        "state": row.state(),
        "channels": row.channels,
        "category": row.category,
        "recipient": row.recipient,
        "next_fire_at": row.next_fire_at,
        "error_count": row.error_count,
        "last_error": row.last_error or "",
    }


@api.post(
    "/notifications",
    operation_id="create_notification",
    tags=TAGS,
    auth=TokenAuth("schedule"),
    response={201: CreatedOut, WRITE_ERRORS: ProblemOut},
)
def create(request: HttpRequest, data: NotificationIn) -> Status[Any]:
    """Schedule one notification: schedule()'s keyword arguments as JSON."""
    fields = _arguments(data)
    row = _validated(lambda: schedule_notification(**fields))
    return Status(201, {"id": row.pk, "key": row.key, "state": row.state(), "next_fire_at": row.next_fire_at})


@api.post(
    "/notifications/batch",
    operation_id="create_notifications",
    tags=TAGS,
    auth=TokenAuth("schedule"),
    response={201: BatchOut, WRITE_ERRORS: ProblemOut},
)
def create_many(request: HttpRequest, batch: BatchIn) -> Status[Any]:
    """Schedule many notifications, all or none, as schedule_many(); errors name `<index>.<field>`."""
    most = positive_int("API_MAX_BATCH")
    if len(batch.rows) > most:
        raise problems.Problem(422, f"A batch holds at most {most} rows.", {"rows": [f"At most {most} rows."]})
    rows = [_arguments(row, f"{index}.") for index, row in enumerate(batch.rows)]
    saved = _validated(lambda: schedule_many(rows, on_conflict=batch.on_conflict))
    return Status(201, {"ids": [row.pk for row in saved]})


@api.get(
    "/notifications",
    operation_id="read_notification_by_key",
    tags=TAGS,
    auth=TokenAuth("read"),
    response={200: NotificationOut, READ_ERRORS: ProblemOut},
)
def read_by_key(request: HttpRequest, key: str) -> dict[str, Any]:
    """The row holding `key`."""
    try:
        pk = _validated(lambda: pk_of(key))
    except Notification.DoesNotExist:
        raise problems.Problem(404, "No notification has this key.") from None
    return _shown(_row(pk))


@api.get(
    "/notifications/{id}",
    operation_id="read_notification",
    tags=TAGS,
    auth=TokenAuth("read"),
    response={200: NotificationOut, READ_ERRORS: ProblemOut},
)
def read(request: HttpRequest, id: int) -> dict[str, Any]:
    """The row `id`."""
    return _shown(_row(id))


@api.post(
    "/notifications/{id}/cancel",
    operation_id="cancel_notification",
    tags=TAGS,
    auth=TokenAuth("manage"),
    response={204: None, WRITE_ERRORS: ProblemOut},
)
def cancel_one(request: HttpRequest, id: int) -> Status[Any]:
    """Delete the row; a firing in flight writes nothing back."""
    if not cancel(_row(id)):
        raise problems.Problem(404, "No such notification.")
    return Status(204, None)


def _acting(action: Callable[[Notification], Notification], pk: int) -> dict[str, Any]:
    try:
        return _shown(action(_row(pk)))
    except Notification.DoesNotExist:
        raise problems.Problem(404, "No such notification.") from None


@api.post(
    "/notifications/{id}/pause",
    operation_id="pause_notification",
    tags=TAGS,
    auth=TokenAuth("manage"),
    response={200: NotificationOut, WRITE_ERRORS: ProblemOut},
)
def pause_one(request: HttpRequest, id: int) -> dict[str, Any]:
    """Pause the row: not claimed until resumed."""
    return _acting(pause, id)


@api.post(
    "/notifications/{id}/resume",
    operation_id="resume_notification",
    tags=TAGS,
    auth=TokenAuth("manage"),
    response={200: NotificationOut, WRITE_ERRORS: ProblemOut},
)
def resume_one(request: HttpRequest, id: int) -> dict[str, Any]:
    """Unpause the row."""
    return _acting(resume, id)


@api.post(
    "/notifications/{id}/run-now",
    operation_id="run_notification_now",
    tags=TAGS,
    auth=TokenAuth("manage"),
    response={200: NotificationOut, WRITE_ERRORS: ProblemOut},
)
def run_now_one(request: HttpRequest, id: int) -> dict[str, Any]:
    """Make the row due now."""
    return _acting(run_now, id)
