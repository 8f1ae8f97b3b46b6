"""A NOTIFICATIONS_* setting the app does not know, a typo most likely (W005)."""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.core import checks

from notifications.conf import (
    Defaults,
    app_settings,
)


@checks.register()
def check_unknown_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    known = {name for name in vars(Defaults) if name.isupper()}
    messages: list[checks.CheckMessage] = []
    for name in sorted(dir(settings)):
        if not name.startswith(app_settings.prefix):
            continue
        short = name[len(app_settings.prefix) :]
        if short in known:
            continue
        close = difflib.get_close_matches(short, known, n=1)
        hint = f"Did you mean NOTIFICATIONS_{close[0]}?" if close else "See docs/settings.md."
        messages.append(
            checks.Warning(
                f"{name} is not a setting of the notifications app; it has no effect.",
                hint=hint,
                id="notifications.W005",
            )
        )
    return messages
