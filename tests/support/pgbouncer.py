"""A PgBouncer of its own in transaction pooling, for the tests and the benchmark.

Debian's `pgbouncer` package (the binary only: no system service is used). `PgBouncer.start`
writes a config and an auth file in a temporary folder, listens on a free loopback port
and forwards every database name to the PostgreSQL given (trust: the user needs no
password, as on the local test server). Standard library only: bench/ uses it too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

# Where Debian puts it, when it is not on PATH (/usr/sbin is not on every user's).
DEBIAN_BINARY = "/usr/sbin/pgbouncer"
START_TIMEOUT = 60.0  # seconds; generous, the machine is shared
# PgBouncer will not run as root; when the tests do, it drops to this user.
UNPRIVILEGED_USER = "nobody"


def binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return DEBIAN_BINARY if os.access(DEBIAN_BINARY, os.X_OK) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def config(port: int, server_host: str, server_port: int, user: str, folder: Path) -> str:
    return f"""[databases]
* = host={server_host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "userlist.txt"}
admin_users = {user}
pool_mode = transaction
max_client_conn = 500
default_pool_size = 40
; Django sends none of these unless OPTIONS ask; psycopg's `options` (-c ...) would be
; refused at connect otherwise.
ignore_startup_parameters = extra_float_digits,options
"""


class PgBouncer:
    """One running PgBouncer; `close()` stops it. Use `PgBouncer.start(...)`."""

    def __init__(self, proc: subprocess.Popen[str], port: int, folder: Path, log: list[str]) -> None:
        self.proc = proc
        self.host = "127.0.0.1"
        self.port = port
        self.folder = folder
        self.log = log

    @classmethod
    def start(cls, server_host: str = "127.0.0.1", server_port: int = 5432, user: str = "postgres") -> PgBouncer:
        """Start one in front of `server_host:server_port`; RuntimeError (with its log) when it
        does not come up within START_TIMEOUT, FileNotFoundError when it is not installed."""
        executable = binary()
        if executable is None:
            raise FileNotFoundError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        folder = Path(tempfile.mkdtemp(prefix="notifications-pgbouncer-"))
        folder.chmod(0o755)  # readable by the unprivileged user it may run as
        (folder / "userlist.txt").write_text(f'"{user}" ""\n')
        last_error = ""
        for _ in range(3):  # the free port may be taken between finding and binding it
            port = free_port()
            ini = folder / "pgbouncer.ini"
            ini.write_text(config(port, server_host, server_port, user, folder))
            for path in folder.iterdir():
                path.chmod(0o644)
            command = [executable, str(ini)]
            if os.geteuid() == 0:
                command[1:1] = ["-u", UNPRIVILEGED_USER]
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            log: list[str] = []
            up = threading.Event()
            threading.Thread(target=_read_log, args=(proc, log, up), daemon=True).start()
            up.wait(START_TIMEOUT)
            if up.is_set() and proc.poll() is None:
                return cls(proc, port, folder, log)
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait(10)
            last_error = "\n".join(log[-20:])
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"pgbouncer did not start:\n{last_error}")

    def database(self, settings_dict: dict) -> dict:
        """A copy of a Django DATABASES entry that connects through this PgBouncer."""
        return {**settings_dict, "HOST": self.host, "PORT": self.port}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _read_log(proc: subprocess.Popen[str], into: list[str], up: threading.Event) -> None:
    """Collect its output; set `up` once it says it is up (or it exits: the caller looks)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        into.append(line.rstrip("\n"))
        if "process up" in line:
            up.set()
    up.set()
