"""Categories of notification and what a recipient chose for them (pure).

`NOTIFICATIONS_CATEGORIES = {"billing": {"label": "Invoices", "default": "required"},
"news": {"label": "Product news", "default": "on", "throttle": "3/d"}}`:

- `default` "on": sent unless the recipient turned it off; "off": sent only where turned
  on; "required": always sent, cannot be turned off, no unsubscribe header.
- `throttle` "N/s", "N/m", "N/h" or "N/d": at most N firings of the category reach one
  recipient per window.
- `channels` (optional): the channels the category's messages go out on, which the
  preference centre offers for it; without it, every channel. A channel no category on
  the page reaches is not offered (a site's monitoring or log channel).

A recipient's effective choice for one category and channel: a preference for that
channel, else one for every channel (blank channel), else the category's default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ON, OFF, REQUIRED = "on", "off", "required"
DEFAULTS = (ON, OFF, REQUIRED)
EVERY_CHANNEL = ""  # a preference's channel for every channel
MAX_CATEGORY_CHARS = 100  # the columns that hold a category key
THROTTLE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
THROTTLE_RE = re.compile(r"^\s*(\d+)\s*/\s*([smhd])\s*$")


@dataclass(frozen=True)
class Throttle:
    """At most `count` firings per `period` seconds."""

    count: int
    period: int

    def __str__(self) -> str:
        unit = next(u for u, s in THROTTLE_UNITS.items() if s == self.period)
        return f"{self.count}/{unit}"


@dataclass(frozen=True)
class Category:
    """One entry of NOTIFICATIONS_CATEGORIES."""

    key: str
    label: str
    default: str = ON
    throttle: Throttle | None = None
    channels: tuple[str, ...] | None = None  # None: every channel

    @property
    def required(self) -> bool:
        return self.default == REQUIRED

    def reaches(self, channel: str) -> bool:
        """Whether the category's messages go out on `channel`."""
        return self.channels is None or channel in self.channels


def parse_throttle(spec: Any) -> Throttle:
    """`"3/d"` -> Throttle(3, 86400); ValueError saying what is wrong."""
    match = THROTTLE_RE.match(spec) if isinstance(spec, str) else None
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"{spec!r} is not N/s, N/m, N/h or N/d with N >= 1")
    return Throttle(int(match.group(1)), THROTTLE_UNITS[match.group(2)])


def errors(value: Any) -> list[str]:
    """What is wrong with a NOTIFICATIONS_CATEGORIES value; empty when it is usable."""
    if not isinstance(value, Mapping):
        return [f"must be a dict of category -> options, not {type(value).__name__}"]
    problems = []
    for key, options in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_CATEGORY_CHARS or key != key.strip():
            problems.append(f"category {key!r} must be a non-blank string of at most {MAX_CATEGORY_CHARS} characters")
            continue
        if not isinstance(options, Mapping):
            problems.append(f"{key}: must be a dict such as {{'label': ..., 'default': 'on'}}")
            continue
        unknown = set(options) - {"label", "default", "throttle", "channels"}
        if unknown:
            problems.append(f"{key}: unknown option(s) {', '.join(sorted(map(repr, unknown)))}")
        if not isinstance(options.get("label", key), str):
            problems.append(f"{key}: label must be a string")
        if options.get("default", ON) not in DEFAULTS:
            problems.append(f"{key}: default must be 'on', 'off' or 'required', not {options.get('default')!r}")
        if "throttle" in options and options["throttle"] is not None:
            try:
                parse_throttle(options["throttle"])
            except ValueError as exc:
                problems.append(f"{key}: throttle {exc}")
        channels = options.get("channels")
        if channels is not None and (
            not isinstance(channels, list | tuple) or not all(isinstance(c, str) and c for c in channels)
        ):
            problems.append(f"{key}: channels must be a list of channel names, such as ['email', 'sms']")
    return problems


def parse(value: Any) -> dict[str, Category]:
    """The usable categories of a setting; a value `errors` rejects means none (the
    system check says why), so a misconfigured site keeps sending."""
    if errors(value):
        return {}
    return {
        key: Category(
            key=key,
            label=options.get("label") or key,
            default=options.get("default", ON),
            throttle=parse_throttle(options["throttle"]) if options.get("throttle") else None,
            channels=tuple(options["channels"]) if options.get("channels") is not None else None,
        )
        for key, options in value.items()
    }


# A recipient's stored choices: (category, channel) -> enabled; channel "" for every channel.
Choices = Mapping[tuple[str, str], bool]


def enabled(category: Category, channel: str, choices: Choices) -> bool:
    """The effective choice: required beats all; then a choice for `channel`, one for every
    channel, the category's default."""
    if category.required:
        return True
    for key in ((category.key, channel), (category.key, EVERY_CHANNEL)):
        if key in choices:
            return bool(choices[key])
    return category.default == ON


def table(categories: Iterable[Category], channels: Iterable[str], choices: Choices) -> dict[str, dict[str, bool]]:
    """`{category: {channel: enabled}}` for every category and channel."""
    names = list(channels)
    return {c.key: {name: enabled(c, name, choices) for name in names} for c in categories}
