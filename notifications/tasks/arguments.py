"""A task's arguments and return value must survive JSON: refused at `enqueue`, not at run time.

"Survive" means that what the task receives equals what was passed, as Django's own
backends read it (`normalize_json`: a tuple arrives as a list): a datetime, a set, bytes,
a model instance, a dict with keys that are not strings, NaN or infinity are refused.
The return value cannot be seen before the task runs; its annotation can: a task declared
to return a type JSON cannot hold is refused at `enqueue` too (an unannotated task that
returns one fails that attempt, as any exception would).
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from notifications.exceptions import NotificationsError

# Annotations of values JSON keeps as they are (a tuple's items come back as a list).
JSON_TYPES = (type(None), bool, int, float, str, list, dict, tuple)


class TaskArgumentsError(NotificationsError, TypeError):
    """A task's arguments (or declared return value) would not survive JSON."""


def check_arguments(task_path: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """`args` and `kwargs` as the task will receive them; `TaskArgumentsError` naming the
    first one that JSON would not keep."""
    checked_args = [_checked(task_path, f"args[{i}]", value) for i, value in enumerate(args)]
    checked_kwargs = {}
    for key, value in kwargs.items():
        checked_kwargs[key] = _checked(task_path, f"kwargs[{key!r}]", value)
    return checked_args, checked_kwargs


def _checked(task_path: str, where: str, value: Any) -> Any:
    problem = why_not_json(value)
    if problem is not None:
        raise TaskArgumentsError(
            f"{task_path}: {where} cannot be passed to a task: {problem}. "
            "Arguments are stored as JSON: pass strings, numbers, booleans, None, lists and "
            "dicts with string keys (a model instance by its primary key, a datetime as ISO 8601)."
        )
    return json.loads(json.dumps(value))


def why_not_json(value: Any, depth: int = 0) -> str | None:
    """Why JSON would not keep `value` as it is, or None."""
    if depth > 100:
        return "it is nested more than 100 levels deep"
    if value is None or isinstance(value, bool | str | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is no JSON number"
    if isinstance(value, list | tuple):
        return next((p for p in (why_not_json(v, depth + 1) for v in value) if p), None)
    if isinstance(value, dict):
        if any(not isinstance(k, str) for k in value):
            return "a dict's keys must be strings"
        return next((p for p in (why_not_json(v, depth + 1) for v in value.values()) if p), None)
    return f"a {type(value).__module__}.{type(value).__qualname__} is not JSON"


def check_return_annotation(task_path: str, func: Any) -> None:
    """Refuse a task whose declared return type JSON cannot hold (unannotated: accepted)."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve says nothing
        return
    if "return" in hints and not json_annotation(hints["return"]):
        raise TaskArgumentsError(
            f"{task_path} is declared to return {hints['return']!r}, which JSON cannot hold: "
            "a task's return value is stored as JSON (return strings, numbers, booleans, None, lists or dicts)."
        )


def json_annotation(annotation: Any) -> bool:
    """Whether values of `annotation` survive JSON (`Any` and unknown generics: trusted)."""
    if annotation is Any or annotation is None:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(json_annotation(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return all(why_not_json(a) is None for a in typing.get_args(annotation))
    if origin in (typing.Annotated,):
        return json_annotation(typing.get_args(annotation)[0])
    if origin is not None:
        annotation = origin
    if not isinstance(annotation, type):
        return True  # a TypeVar, a NewType, a string: nothing certain to refuse
    return issubclass(annotation, JSON_TYPES) and not issubclass(annotation, bytes)
