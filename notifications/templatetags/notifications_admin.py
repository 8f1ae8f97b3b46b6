"""Template filters for the app's admin pages."""

from __future__ import annotations

from datetime import timedelta

from django import template

from notifications.health import humanize

register = template.Library()


@register.filter
def age(delta: timedelta | None) -> str:
    """A timedelta as a short age: `45s`, `3m 10s`, `2h 5m`."""
    return humanize(delta)
