"""The signed-in user's inbox: the page and its JSON endpoints (`notifications.urls`).

Each reads and changes only the request's own recipient's messages, through
`notifications.inbox`. State changes by POST alone, CSRF-checked; reads are private to
the person (no shared cache, `Vary: Cookie`). Without a recipient the page redirects to
the login and the JSON endpoints answer 401 with a body that says nothing more.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotModified,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.crypto import salted_hmac
from django.utils.http import parse_etags, quote_etag
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from notifications import inbox
from notifications.inbox.web import cursor as cursors
from notifications.inbox.web.cors import cross_origin
from notifications.inbox.web.recipient import recipient_of
from notifications.rules.inbox_links import is_message_link

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
PAGE_SIZE = 25  # messages on one screen of the page
MAX_IDS = 1000  # ids one mark may name: a larger body costs the database, not the person
ETAG_SALT = "notifications.inbox.counts"
UNAUTHORIZED = {"error": "unauthorized"}
LIST_LABELS = {"unread": _("Unread"), "all": _("All"), "archived": _("Archived")}


def _private(response: HttpResponse) -> HttpResponse:
    """One person's answer: no shared cache keeps it, a browser asks again each time."""
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ["Cookie"])
    return response


def _unauthorized() -> HttpResponse:
    return _private(JsonResponse(UNAUTHORIZED, status=401))


def _bad_request(error: str) -> HttpResponse:
    return _private(JsonResponse({"error": error}, status=400))


def _counts_etag(recipient: str, counts: dict[str, int]) -> str:
    """Per recipient and per counts; keyed, so it tells nothing about who or how many."""
    value = json.dumps([recipient, counts], sort_keys=True)
    return quote_etag(salted_hmac(ETAG_SALT, value, algorithm="sha256").hexdigest()[:32])


def _matches(request: HttpRequest, etag: str) -> bool:
    """`If-None-Match` names `etag` (weak comparison, as RFC 9110 has it for GET) or is `*`."""
    sent = parse_etags(request.headers.get("If-None-Match", ""))
    return "*" in sent or any(tag.removeprefix("W/") == etag for tag in sent)


@cross_origin
@require_GET
def counts(request: HttpRequest) -> HttpResponse:
    """`inbox/counts`: `{"unseen", "unread", "total"}`, with an ETag; 304 when it matches."""
    recipient = recipient_of(request)
    if recipient is None:
        return _unauthorized()
    found = inbox.counts(recipient)
    etag = _counts_etag(recipient, found)
    response = HttpResponseNotModified() if _matches(request, etag) else JsonResponse(found)
    response["ETag"] = etag
    return _private(response)


def _when(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _as_json(message: Any) -> dict[str, Any]:
    return {
        "id": str(message.id),
        "title": message.title,
        "body": message.body,
        "url": message.url,
        "category": message.category,
        "data": message.data,
        "created_at": _when(message.created_at),
        "seen_at": _when(message.seen_at),
        "read_at": _when(message.read_at),
    }


def _limit(value: str | None) -> int | None:
    """`limit` as a number 1-100 (absent: 20), or None when it is anything else."""
    if value is None:
        return DEFAULT_LIMIT
    if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        return None
    return int(value)


def _page(
    recipient: str, state: str, category: str | None, cursor: str | None, size: int
) -> tuple[list[Any], str | None]:
    """One page of the recipient's messages from `cursor`, and the next page's cursor (None
    after the last). Raises cursors.BadCursor."""
    found = list(cursors.older_than(inbox.messages(recipient, state, category), cursor)[: size + 1])
    page = found[:size]
    return page, cursors.after(page[-1]) if len(found) > size else None


@cross_origin
@require_GET
def messages(request: HttpRequest) -> HttpResponse:
    """`inbox/messages`: a page of messages, newest first, and the next page's cursor."""
    recipient = recipient_of(request)
    if recipient is None:
        return _unauthorized()
    state = request.GET.get("state", "unread")
    if state not in inbox.LISTS:
        return _bad_request(f"state must be one of {', '.join(inbox.LISTS)}")
    limit = _limit(request.GET.get("limit"))
    if limit is None:
        return _bad_request(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    try:
        page, following = _page(recipient, state, request.GET.get("category"), request.GET.get("cursor"), limit)
    except cursors.BadCursor:
        return _bad_request("cursor is not one this endpoint gave")
    return _private(JsonResponse({"messages": [_as_json(message) for message in page], "next": following}))


def _mark_request(body: bytes) -> tuple[list[str] | str, str] | None:
    """The `ids` and `state` of a mark's JSON body, or None when it is not such an object."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or set(payload) != {"ids", "state"}:
        return None
    ids, state = payload["ids"], payload["state"]
    if not isinstance(state, str) or state not in inbox.MARKS:
        return None
    if ids == "all":
        return ids, state
    if not isinstance(ids, list) or len(ids) > MAX_IDS or not all(isinstance(pk, str) for pk in ids):
        return None
    return ids, state


@cross_origin
@require_POST
def mark(request: HttpRequest) -> HttpResponse:
    """`inbox/mark`: `{"ids": [...] | "all", "state": ...}` -> `{"changed": n, "counts": {...}}`."""
    recipient = recipient_of(request)
    if recipient is None:
        return _unauthorized()
    asked = _mark_request(request.body)
    if asked is None:
        return _bad_request(f'the body must be {{"ids": [...] or "all", "state": one of {", ".join(inbox.MARKS)}}}')
    ids, state = asked
    changed = inbox.mark(recipient, ids, state)
    return _private(JsonResponse({"changed": changed, "counts": inbox.counts(recipient)}))


@csrf_protect
@require_http_methods(["GET", "POST"])
def page(request: HttpRequest) -> HttpResponse:
    """`inbox/`: the newest messages, with mark read/unread, archive and mark all read as
    POST forms (it works without JavaScript: each form answers with a redirect back)."""
    recipient = recipient_of(request)
    if recipient is None:
        return redirect_to_login(request.get_full_path())
    listed = request.GET.get("state", "all")
    if listed not in inbox.LISTS:
        listed = "all"
    if request.method == "POST":
        return _mark_from_form(request, recipient, listed)
    try:
        shown, following = _page(recipient, listed, None, request.GET.get("cursor"), PAGE_SIZE)
    except cursors.BadCursor:
        return HttpResponseRedirect(f"{reverse('notifications:inbox')}?state={listed}")
    for message in shown:
        message.link = message.url if is_message_link(message.url) else ""
    context = {
        "messages": shown,
        "next": following,
        "listed": listed,
        "lists": [(name, LIST_LABELS[name]) for name in inbox.LISTS],
        "counts": inbox.counts(recipient),
    }
    return _private(TemplateResponse(request, "notifications/inbox/page.html", context))


def _mark_from_form(request: HttpRequest, recipient: str, listed: str) -> HttpResponse:
    """A form's mark: one message (`ids`) or all (`ids=all`), then back to the same list."""
    state, ids = request.POST.get("state", ""), request.POST.get("ids", "")
    if state not in inbox.MARKS or not ids:
        return HttpResponseBadRequest("Unknown mark.")
    inbox.mark(recipient, "all" if ids == "all" else [ids], state)
    return HttpResponseRedirect(f"{reverse('notifications:inbox')}?state={listed}", status=303)
