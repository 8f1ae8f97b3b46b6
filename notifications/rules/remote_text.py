"""What a remote party's or a site channel's text may be once stored: one line, no control
characters, bounded (SPEC v5: whatever a server or a site's channel answers is cleaned and
bounded before it is stored). Pure: `notifications.channels.results` applies it to a
channel's result; the delivery log's columns are sized by it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["ERROR_CHARS", "REASON_CHARS", "SENT_TO_CHARS", "SUMMARY_CHARS", "clip", "one_line"]

# Sizes of the sent log's columns (`DeliveryAttempt.sent_to`, `.summary`).
SENT_TO_CHARS = 500
SUMMARY_CHARS = 300
# One channel's error as `last_error` and the delivery log keep it: enough for a server's
# sentence, never a page (a site channel once returned 5,000,009 characters).
ERROR_CHARS = 1000
# Why an address was refused for good, as the suppression list keeps it.
REASON_CHARS = 200

# Unicode categories dropped: controls (NUL, ESC, ...) and lone surrogates, which
# PostgreSQL refuses (NUL) or no UTF-8 column holds; formats (bidi overrides, zero-width
# characters) that make a line read otherwise in the admin.
_DROPPED = {"Cc", "Cs", "Cf"}


def one_line(text: str, limit: int) -> str:
    """`text` as one line any database stores: whitespace (newlines too) runs become one
    space, control and format characters go, and it is cut to `limit` characters."""
    # Cut early, generously: cleaning five million characters costs time for nothing.
    text = text[: limit * 4]
    if text.isascii() and text.isprintable():  # the common case (a host, "webhook: HTTP 503"):
        return clip(" ".join(text.split()), limit)  # no control or format character to look for
    kept = (" " if ch.isspace() else ch for ch in text if ch.isspace() or unicodedata.category(ch) not in _DROPPED)
    return clip(" ".join("".join(kept).split()), limit)


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
