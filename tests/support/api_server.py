"""The HTTP API served by a process of its own, for tests that kill a server mid-request.

    python -m tests.support.api_server [--pause-after-create]

Django's threaded WSGI server on a free loopback port, against the running test's
database (tests/child_settings.py); it prints `serving <port>` once it listens. With
`--pause-after-create`, a single create stops right after its row is inserted (inside
the request's transaction, before the answer is stored), prints `paused <id>` and waits
there until the test kills the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from tests.support.processes import REPO, child_env

READY, PAUSED = "serving", "paused"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.child_settings")
    import django

    django.setup()
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    if "--pause-after-create" in sys.argv:
        _pause_after_create()

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet)
    server.set_app(get_wsgi_application())
    print(f"{READY} {server.server_port}", flush=True)
    server.serve_forever()


def _pause_after_create() -> None:
    from notifications.http_api import endpoints

    real = endpoints.schedule_notification

    def paused(**fields: Any) -> Any:
        row = real(**fields)
        print(f"{PAUSED} {row.pk}", flush=True)
        threading.Event().wait()  # until the test kills this process
        return row

    endpoints.schedule_notification = paused


class ApiServer:
    """One server child; `lines` are what it printed, read as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.api_server", *args],
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.port = int(self.wait_for(READY).split()[1])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        self.proc.wait()  # so that wait_for sees the exit
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, prefix: str, timeout: float = 60) -> str:
        """The first line printed that starts with `prefix`; fails with the output if none comes."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(line.startswith(prefix) for line in self.lines) or self.proc.poll() is not None, timeout
            )
            matches = [line for line in self.lines if line.startswith(prefix)]
            if not found or not matches:
                output = "\n".join(self.lines)
                raise AssertionError(f"the API server printed no {prefix!r} within {timeout}s:\n{output}")
            return matches[0]

    def kill(self) -> None:
        """SIGKILL: the process dies at once, its requests' transactions unfinished."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


if __name__ == "__main__":
    main()
