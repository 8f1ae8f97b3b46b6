"""What an Apprise 1.9 service said when it refused a message.

Apprise 2.x's `notify()` returns each service's result with the lines it logged; 1.9's
returns a bool, and the service's own words (`Failed to send to Slack: Page not found.,
error=404.`) go only to the `apprise` logger. `listening()` collects the warnings logged
in the calling thread while it is open: a single service's `notify()` runs in the
caller's thread, so concurrent sends of other workers never mix their words in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _ThreadWords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        words = getattr(self.local, "words", None)
        if words is not None:
            words.append(record.getMessage())


_handler = _ThreadWords()
_installed = threading.Lock()


@contextmanager
def listening() -> Iterator[list[str]]:
    """The warnings and errors the `apprise` logger gets in this thread meanwhile."""
    with _installed:
        logger = logging.getLogger("apprise")
        if _handler not in logger.handlers:
            logger.addHandler(_handler)
    words: list[str] = []
    _handler.local.words = words
    try:
        yield words
    finally:
        _handler.local.words = None
