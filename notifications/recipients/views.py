"""The recipients' public pages (`notifications.urls`): no login, the signed link is the key.

- `unsubscribe`: RFC 8058. A POST with the form body `List-Unsubscribe=One-Click` (a mail
  client's one click, or the page's own button) turns the token's category off for its
  recipient's email and answers 200: no login, no cookie, no CSRF token (the signed token
  is what proves the request), no redirect; again changes nothing more. A GET only shows
  a page with a confirm button: link scanners fetch URLs, and must not unsubscribe anyone.
- `preference_centre`: every category by label x the channels it goes out on (each by the
  label a person reads: `registry.label`), required ones locked; a channel no category
  reaches is not offered. Its form is CSRF-protected and saves what changed.

A forged or altered token answers 404 and changes nothing. Pages say nothing about any
other recipient, and tokens stay out of the request log (the 404 is not logged with its
path) and out of the Referer of links the pages hold.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from notifications.channels import registry
from notifications.conf import categories
from notifications.content import links
from notifications.rules import categories as rules
from notifications.services.preferences import preferences, set_preference

EMAIL = "email"


def _private(response: HttpResponse) -> HttpResponse:
    """Headers of every public page: never indexed, never sent as a Referer to another site
    (same-origin, not no-referrer: a browser would then send `Origin: null` with the
    preference centre's form, which CSRF protection refuses)."""
    response["Referrer-Policy"] = "same-origin"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response


def _invalid(request: HttpRequest) -> HttpResponse:
    """A token that is forged, altered, or no longer of any use: 404, nothing changed."""
    response = TemplateResponse(request, "notifications/recipients/invalid.html", status=404)
    response._has_been_logged = True  # type: ignore[attr-defined] # django.request would log the path: the token
    return _private(response)


def _page(request: HttpRequest, template: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    return _private(TemplateResponse(request, f"notifications/recipients/{template}", context, status=status))


def _one_click(request: HttpRequest) -> bool:
    """The POST carries RFC 8058's `List-Unsubscribe=One-Click`: as a form field (either
    form encoding the RFC allows), or as the whole body of a client that sent no type."""
    if request.POST.get("List-Unsubscribe") == "One-Click":
        return True
    return request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data") and (
        request.body.strip() == links.ONE_CLICK.encode()
    )


@csrf_exempt  # RFC 8058: a mail client's POST carries no token but the signed URL's
@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """One-click unsubscribe from one category's email (RFC 8058)."""
    found = links.read_unsubscribe(token)
    known = categories()
    if found is None or found[1] not in known:
        return _invalid(request)
    recipient, key = found
    category = known[key]
    context = {
        "category": category,
        "preferences_url": links.preferences_url(recipient) or "",
        "required": category.required,
    }
    if request.method != "POST":
        return _page(request, "unsubscribe.html", context)
    if not _one_click(request):
        return _page(request, "unsubscribe.html", {**context, "bad_request": True}, status=400)
    if not category.required:
        try:
            set_preference(recipient, key, False, channel=EMAIL)
        except ValidationError:  # a recipient key the preferences cannot hold
            return _invalid(request)
    return _page(request, "unsubscribed.html", context)


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def preference_centre(request: HttpRequest, token: str) -> HttpResponse:
    """The recipient's choices: categories by label x channels; required ones locked."""
    recipient = links.read_preferences(token)
    if recipient is None:
        return _invalid(request)
    known = categories()
    people = set(registry.audience_names())
    entries = {name: entry for name, entry in registry.entries().items() if name in people}
    current = preferences(recipient)
    if request.method == "POST":
        for key, category in known.items():
            if category.required:
                continue
            for name in entries:
                if not category.reaches(name):
                    continue  # not offered: nothing to read from the form
                wanted = f"{key}:{name}" in request.POST
                if wanted != current.get(key, {}).get(name):
                    set_preference(recipient, key, wanted, channel=name)
        # Post/Redirect/Get: reloading the page does not post the form again.
        return _private(HttpResponseRedirect(request.path + "?saved=1", status=303))
    labels = {name: registry.label(entry) for name, entry in entries.items()}
    rows = []
    for index, (key, category) in enumerate(known.items()):
        choices = [
            {
                "name": f"{key}:{name}",
                "id": f"pref-{index}-{column}",
                "label": labels[name],
                "checked": current.get(key, {}).get(name, rules.enabled(category, name, {})),
            }
            for column, name in enumerate(entries)
            if category.reaches(name)
        ]
        if choices:  # a category that reaches no channel of the site has nothing to choose
            rows.append({"key": key, "label": category.label, "required": category.required, "choices": choices})
    return _page(request, "preferences.html", {"categories": rows, "saved": request.GET.get("saved") == "1"})
