"""Link tokens stay out of the logs: a token is the key to a person's choices.

Django logs the path of a request it answers with an error: `django.request` (a 4xx
warning, a 500 error), `django.security.csrf` (a 403 on the preference centre's form) and,
under runserver, `django.server` (every request line). `install()` puts `RedactTokens` on
those loggers (a logger's filters see the records logged on it, which is where Django logs
these): a path of the app's public pages (`notifications.urls`) has its token replaced by
`[token]` in the record's message and arguments before any handler formats it.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote, urlsplit

from django.urls import Resolver404, get_script_prefix, resolve

# The loggers that write a request's path (django.request also carries the request).
LOGGERS = ("django.request", "django.security.csrf", "django.server")
PAGES = {"notifications:unsubscribe", "notifications:preferences"}
REDACTED = "[token]"


class RedactTokens(logging.Filter):
    """Replaces the token of a public page's path in a record; never drops the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        texts = [str(record.msg), *(a for a in _args(record.args) if isinstance(a, str))]
        request = getattr(record, "request", None)
        path_info = getattr(request, "path_info", None)
        found = {t for t in (_token(path_info) if isinstance(path_info, str) else None,) if t}
        found |= {t for text in texts for word in text.split() if (t := _token_in_url(word))}
        if not found:
            return True
        record.msg = _redact(record.msg, found)
        if isinstance(record.args, dict):
            record.args = {key: _redact(value, found) for key, value in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(_redact(value, found) for value in record.args)
        return True


def install() -> None:
    """Put the filter on Django's request-logging loggers, once."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())


def _args(args: Any) -> list[Any]:
    if isinstance(args, dict):
        return list(args.values())
    return list(args) if isinstance(args, tuple) else []


def _token_in_url(word: str) -> str | None:
    """The token of a path (or a URL, as a request line or a Referer spells it)."""
    path = urlsplit(word.strip("\"'")).path
    if not path.startswith("/"):
        return None
    prefix = get_script_prefix()
    return _token("/" + path[len(prefix) :] if path.startswith(prefix) else path)


def _token(path_info: str) -> str | None:
    try:
        match = resolve(path_info)
    except (Resolver404, ValueError):
        return None
    token = match.kwargs.get("token")
    if match.view_name in PAGES and isinstance(token, str) and token:
        return token
    return None


def _redact(value: Any, tokens: set[str]) -> Any:
    if not isinstance(value, str):
        return value
    for token in sorted(tokens, key=len, reverse=True):
        value = value.replace(token, REDACTED)
        value = value.replace(unquote(token), REDACTED)  # unquoted spellings too
    return value
