"""`runtick` on a read-only database says so in one line and exits non-zero (issue 34,
finding 11); it printed a traceback of some 70 lines.

The child's connection is read-only by its own OPTIONS, as on a hot standby or with
`default_transaction_read_only` set for the database (PostgreSQL), or a read-only
session (MariaDB/MySQL): the test database itself stays writable.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection  # noqa: F401 - the skipif condition reads it

from notifications.models import Notification
from tests.support.processes import REPO, child_env

READ_ONLY_OPTIONS = {
    "postgresql": {"options": "-c default_transaction_read_only=on"},
    "mysql": {"init_command": "SET SESSION TRANSACTION READ ONLY"},
}


@pytest.mark.skipif("connection.vendor == 'sqlite'", reason="a server's read-only session")
@pytest.mark.django_db(transaction=True)
def test_runtick_on_a_read_only_database_says_so_in_one_line(make_row, vendor):
    row = make_row()
    env = child_env(db_options=READ_ONLY_OPTIONS[vendor])

    result = subprocess.run(
        [sys.executable, "manage.py", "runtick", "--settings=tests.child_settings"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("CommandError: the database is read-only"), lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert Notification.objects.get(pk=row.pk).claim_token is None  # nothing claimed, nothing sent
