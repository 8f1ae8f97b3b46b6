"""What recipients are offered: categories (E040, W040), the public origin of unsubscribe and
preference links (W041, W043) and List-Unsubscribe's mailto (E042)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from notifications.conf import (
    app_settings,
    public_url,
)


@checks.register()
def check_categories(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.core.validators import validate_email

    from notifications.rules import categories as category_rules

    messages: list[checks.CheckMessage] = []
    value = app_settings.CATEGORIES
    problems = category_rules.errors(value)
    if problems:
        messages.append(
            checks.Error(
                f"NOTIFICATIONS_CATEGORIES is invalid: {'; '.join(problems)}",
                hint='e.g. {"news": {"label": "Product news", "default": "on", "throttle": "3/d"}}; '
                'default is "on", "off" or "required".',
                id="notifications.E040",
            )
        )
    if not problems:
        messages += _check_category_channels(value)
    messages += _check_public_url(categorised=bool(value) and not problems)
    mailto = app_settings.UNSUBSCRIBE_MAILTO
    if mailto:
        try:
            validate_email(mailto)
        except Exception:  # noqa: BLE001 - ValidationError, or a value that is no string
            messages.append(
                checks.Error(
                    "NOTIFICATIONS_UNSUBSCRIBE_MAILTO must be an email address (List-Unsubscribe's mailto:).",
                    id="notifications.E042",
                )
            )
    return messages


def _check_category_channels(value: dict[str, Any]) -> list[checks.CheckMessage]:
    """W040: a category's `channels` names no channel of the site (a typo?): not offered."""
    from notifications.channels import registry

    names = registry.entries()
    return [
        checks.Warning(
            f"NOTIFICATIONS_CATEGORIES[{key!r}]['channels'] names {name!r}, which is no channel of the site: "
            "the preference centre does not offer it.",
            hint=f"Use the names of built-in channels or of NOTIFICATIONS_CHANNELS: {', '.join(names)}.",
            id="notifications.W040",
        )
        for key, options in value.items()
        for name in options.get("channels") or ()
        if name not in names
    ]


PUBLIC_URL_HINT = (
    "Set NOTIFICATIONS_PUBLIC_URL = 'https://example.com' (the site's https origin) and include "
    "notifications.urls in the URLconf; on a developer's machine, with DEBUG on, http://localhost:8000 "
    "or http://127.0.0.1:8000 will do (docs/recipients.md)."
)


def _check_public_url(*, categorised: bool) -> list[checks.CheckMessage]:
    """W041: links cannot be built on NOTIFICATIONS_PUBLIC_URL (unset with categories, http,
    malformed): only the mail that needs them is held, so a warning. W043: an http loopback
    origin, accepted while DEBUG is on."""
    public = public_url()
    if public.development:
        return [
            checks.Warning(
                f"NOTIFICATIONS_PUBLIC_URL is {public.origin}: unsubscribe and preference links are http, "
                "accepted while DEBUG is on so they can be tried on this machine. Mail clients ignore an "
                "http List-Unsubscribe.",
                hint="Set the site's https origin before DEBUG goes off.",
                id="notifications.W043",
            )
        ]
    if not public.problem or not (categorised or app_settings.PUBLIC_URL):
        return []
    held = (
        "email of a category that is not required is held (not sent, no retry spent) until it is fixed; "
        "every other row is sent"
        if categorised
        else "no unsubscribe or preference link can be built"
    )
    return [checks.Warning(f"{public.problem}: {held}.", hint=PUBLIC_URL_HINT, id="notifications.W041")]
