"""RFC 9457 problem details: every error of the API is `application/problem+json` with
`status`, `title`, `detail` and, for invalid input, `errors` ({field: [messages]})."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from django.http import HttpResponse

CONTENT_TYPE = "application/problem+json"


class Problem(Exception):
    """An answer that is an error: raised anywhere in the API, rendered by `response`."""

    def __init__(
        self, status: int, detail: str, errors: dict[str, list[str]] | None = None, retry_after: int | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.retry_after = retry_after


def response(status: int, detail: str, errors: dict[str, list[str]] | None = None) -> HttpResponse:
    """The problem-details response of `status`."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "status": status,
        "title": HTTPStatus(status).phrase,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    answer = HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)
    if status == HTTPStatus.UNAUTHORIZED:
        answer["WWW-Authenticate"] = 'Bearer realm="notifications"'
    return answer


def of(exc: Problem) -> HttpResponse:
    answer = response(exc.status, exc.detail, exc.errors)
    if exc.retry_after is not None:
        answer["Retry-After"] = str(exc.retry_after)
    return answer
