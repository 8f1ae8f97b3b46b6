"""A local TCP server that a test's tasks report to (`task_functions.held_at_gate`): each run
of such a task connects once, so the gate counts the runs, and holds each run until the test
releases it."""

from __future__ import annotations

import contextlib
import socket
import threading


class TaskGate:
    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._held: list[socket.socket] = []
        self._changed = threading.Condition()
        self._released = False
        threading.Thread(target=self._accept, name="task-gate", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed
                return
            with self._changed:
                self._held.append(conn)
                if self._released:
                    conn.sendall(b"released\n")
                self._changed.notify_all()

    @property
    def runs(self) -> int:
        """How many runs of the task have started."""
        with self._changed:
            return len(self._held)

    def wait_for_runs(self, count: int, timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._held) >= count, timeout):
                raise AssertionError(f"{len(self._held)} runs of the task started within {timeout}s, not {count}")

    def release(self) -> None:
        """Let every run go on, and every later one at once."""
        with self._changed:
            self._released = True
            for conn in self._held:
                conn.sendall(b"released\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.server.close()
        with self._changed:
            for conn in self._held:
                conn.close()
