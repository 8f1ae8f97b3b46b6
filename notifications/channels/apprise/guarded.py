"""Apprise's HTTP(S) requests through the webhook's address guard and deadline.

Apprise's services send with `requests` (`requests.post(...)`, a new Session each time),
which would connect wherever a name resolves. Inside `guarded()`, every Session's
`get_adapter` answers http(s) URLs with the webhook transport's adapter instead
(`notifications.channels.http.transport`): the address is checked on the connection
actually made (loopback, private and the rest refused unless
NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS opens them), and the sockets die at the deadline.

The switch is a context variable, so it holds in the threads Apprise starts for a call
(it runs them in a copy of the caller's context) and nowhere else: other code of the
process using requests meanwhile is untouched.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
from requests.adapters import BaseAdapter

from notifications.channels.http import guard, transport

_adapter: contextvars.ContextVar[BaseAdapter | None] = contextvars.ContextVar(
    "notifications_apprise_adapter", default=None
)
# What the guard refused during the current `guarded()` block (services may run in threads).
_refused: contextvars.ContextVar[list[guard.BlockedAddress] | None] = contextvars.ContextVar(
    "notifications_apprise_refused", default=None
)
# Pools of the adapter (hosts, connections per host): a channel talks to a few services.
POOL_HOSTS, POOL_PER_HOST = 16, 8


class GuardedAdapter(transport.DeadlineAdapter):
    """The webhook transport's adapter, noting each refusal of the guard before it fails
    the request (a service reports only that it raised)."""

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        try:
            return super().send(request, *args, **kwargs)
        except Exception as exc:
            blocked = _blocked(exc)
            refused = _refused.get()
            if blocked is not None and refused is not None:
                refused.append(blocked)
            raise


def new_adapter() -> GuardedAdapter:
    return GuardedAdapter(pool_connections=POOL_HOSTS, pool_maxsize=POOL_PER_HOST, max_retries=0)


def _blocked(exc: BaseException | None) -> guard.BlockedAddress | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, guard.BlockedAddress):
            return exc
        seen.add(id(exc))
        exc = (
            exc.__cause__
            or exc.__context__
            or (exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None)
        )
    return None


_installed = False
_install_lock = threading.Lock()


def _install() -> None:
    """Wrap `requests.Session.get_adapter` once per process (a no-op outside `guarded()`)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        original = requests.Session.get_adapter

        def get_adapter(self: requests.Session, url: str) -> Any:
            adapter = _adapter.get()
            if adapter is not None and url[:8].lower().startswith(("http://", "https://")):
                return adapter
            return original(self, url)

        requests.Session.get_adapter = get_adapter  # type: ignore[method-assign]
        _installed = True


@contextmanager
def guarded(adapter: BaseAdapter) -> Iterator[list[guard.BlockedAddress]]:
    """Inside the block, requests' sessions (in this context) send http(s) through `adapter`;
    yields the list of the guard's refusals meanwhile."""
    _install()
    refused: list[guard.BlockedAddress] = []
    token, refused_token = _adapter.set(adapter), _refused.set(refused)
    try:
        yield refused
    finally:
        _adapter.reset(token)
        _refused.reset(refused_token)
