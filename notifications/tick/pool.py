"""The threads a tick's further channels are sent on: daemon threads, so a send that
ignores every deadline (a site channel blocked for good) never keeps the process alive
after the tick's summary, nor `runtick --loop` after SIGTERM (issue 45, finding 3).

`concurrent.futures.ThreadPoolExecutor` cannot do that: its threads are joined when the
interpreter exits, whatever `shutdown(wait=False)` said. This is the part of it the tick
uses: `submit` (a `Future`), and `shutdown`, which waits for nothing.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Work = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class DaemonPool:
    """At most `size` daemon threads, started as work needs them."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self.work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        self.idle = 0
        self.closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self.lock:
            if self.closed:
                raise RuntimeError("the pool is shut down")
            self.work.put((future, fn, args))
            if self.idle:
                self.idle -= 1  # one waiting thread takes it
            elif self.threads < self.size:
                self.threads += 1
                threading.Thread(target=self.run, name=f"{self.name}-{self.threads}", daemon=True).start()
        return future

    def run(self) -> None:
        while (item := self.work.get()) is not None:
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                    future.set_exception(exc)
            with self.lock:
                if self.closed:
                    return
                self.idle += 1

    def shutdown(self) -> None:
        """Cancel the work no thread took, and let idle threads end; a thread still in a send
        is left to it (a daemon: the process does not wait for it)."""
        with self.lock:
            self.closed = True
            threads = self.threads
        while True:
            try:
                item = self.work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in range(threads):
            self.work.put(None)
