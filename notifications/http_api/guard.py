"""What happens to a request before ninja reads it, and to every answer on its way out.

- A body over NOTIFICATIONS_API_MAX_BODY is 413 before it is read whole: refused on its
  Content-Length, and read with a bound besides.
- A body that is not JSON is 415.
- A live token's rate limit (`auth.throttle`): before any transaction, so its bucket's
  row lock lasts one statement, not the operation.
- `Idempotency-Key` on a POST by a valid token: `idempotency.run_once`.
- The views are never wrapped in a site's `ATOMIC_REQUESTS` transaction: an idempotency
  record must commit (and be seen "in progress" on every host) before the operation runs.
- Every answer carries `Cache-Control: no-store`; an error Django or ninja wrote in
  another shape (405) becomes problem details.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse

from notifications.conf import positive_int
from notifications.http_api import auth, idempotency, problems

View = Callable[..., HttpResponse]
JSON_TYPES = ("application/json",)


def guarded(view: View) -> View:
    """`view` behind the body's limits, idempotency, and `Cache-Control: no-store`."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            answer = _answer(view, request, args, kwargs)
        except problems.Problem as exc:
            answer = problems.of(exc)
        answer["Cache-Control"] = "no-store"
        return answer

    for alias in connections:
        wrapper = transaction.non_atomic_requests(using=alias)(wrapper)
    return wrapper


def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """A path under api/v1/ that names no endpoint."""
    answer = problems.response(404, "No endpoint at this path.")
    answer["Cache-Control"] = "no-store"
    return answer


def _answer(view: View, request: HttpRequest, args: Any, kwargs: Any) -> HttpResponse:
    if request.method == "POST":
        _read_body(request)
    token = auth.presented(request)
    if token is not None:
        auth.throttle(token)
    key = request.headers.get(idempotency.HEADER) if request.method == "POST" else None
    if key is not None and token is not None:
        return idempotency.run_once(request, token, key, lambda: _shaped(view(request, *args, **kwargs)))
    return _shaped(view(request, *args, **kwargs))


def _read_body(request: HttpRequest) -> None:
    limit = positive_int("API_MAX_BODY")
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise problems.Problem(400, "Content-Length is not a number.") from None
    if length > limit:
        raise problems.Problem(413, f"The body is over {limit} bytes.")
    data = request.read(limit + 1)  # bounded even if the stream says more than its header
    if len(data) > limit:
        raise problems.Problem(413, f"The body is over {limit} bytes.")
    request._body = data  # what request.body gives ninja from here on
    content_type = request.content_type or ""
    if data and content_type not in JSON_TYPES:
        raise problems.Problem(415, "Send the body as application/json.")


def _shaped(answer: HttpResponse) -> HttpResponse:
    """An error answer not in problem details (ninja's 405) rewritten as one."""
    if answer.status_code >= 400 and answer.get("Content-Type", "").split(";")[0] != problems.CONTENT_TYPE:
        reshaped = problems.response(answer.status_code, answer.reason_phrase)
        if answer.has_header("Allow"):
            reshaped["Allow"] = answer["Allow"]
        return reshaped
    return answer
