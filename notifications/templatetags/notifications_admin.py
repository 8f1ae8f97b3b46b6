"""Template filters for the app's admin pages: the formats of `notifications.admin.display`."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils.safestring import SafeString

from notifications.admin import display

register = template.Library()


@register.filter
def age(delta: timedelta | None) -> str:
    """A timedelta as a short span: `45 s`, `3 min 10 s`, `2 h 5 min`."""
    return display.duration(delta) if delta is not None else ""


@register.filter
def moment(value: datetime | None) -> SafeString | str:
    """`12 s ago` / `in 4 min`, with the exact timestamp (seconds included) on hover."""
    return display.moment(value) or ""
