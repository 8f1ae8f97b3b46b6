"""Argument types shared by the app's management commands."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
# Ages are subtracted from now: one of thousands of years would fall off the calendar.
MAX_AGE = timedelta(days=365 * 1000)
_ZERO = re.compile(r"^\s*0+(?:\.0*)?\s*([smhdw])?\s*$", re.IGNORECASE)


def age(value: str) -> timedelta:
    """An age such as `30d`, `12h`, `90m`, `45s` or `2w` (argparse `type=`)."""
    match = _AGE.match(value)
    if not match:
        raise argparse.ArgumentTypeError(f"{value!r} is not an age: use a number and a unit, e.g. 30d, 12h, 90m")
    try:
        delta: timedelta | None = timedelta(**{_UNITS[match.group(2).lower()]: float(match.group(1))})
    except OverflowError:  # past timedelta's own range
        delta = None
    if delta is None or delta > MAX_AGE:
        raise argparse.ArgumentTypeError(f"{value!r} is more than {MAX_AGE.days // 365} years")
    if delta <= timedelta(0):
        raise argparse.ArgumentTypeError("the age must be more than zero")
    return delta


def age_or_zero(value: str) -> timedelta:
    """An age as `age` takes it, or zero (`0`, with or without a unit): "any age" (argparse `type=`)."""
    if _ZERO.match(value):
        return timedelta(0)
    return age(value)
