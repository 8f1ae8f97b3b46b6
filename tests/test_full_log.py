"""A full disk under runtick's log does not stop a tick or the loop (issue 34, finding 9).

Before the fix `runtick --loop` exited with status 1 at its first line when its output
went to a full disk: no tick ever ran.
"""

from __future__ import annotations

import errno
import io
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from notifications.models import Notification
from tests.support.processes import REPO, child_env

DEV_FULL = Path("/dev/full")


class FullDisk(io.StringIO):
    """A log file on a full disk: every write fails with ENOSPC."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    def write(self, text: str) -> int:
        self.tries += 1
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.django_db(transaction=True)
def test_a_tick_whose_summary_cannot_be_written_still_delivers_and_exits_cleanly(make_row, caplog):
    row = make_row()
    full, errors = FullDisk(), FullDisk()

    call_command("runtick", stdout=full, stderr=errors)  # no OSError

    assert full.tries >= 1  # the summary line was tried
    assert not Notification.objects.filter(pk=row.pk).exists()  # delivered
    assert "cannot write to stdout (No space left on device)" in caplog.text


@pytest.mark.slow
@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
@pytest.mark.django_db(transaction=True)
def test_the_loop_goes_on_ticking_with_its_output_on_a_full_disk(make_row, webhook_server):
    make_row(channels=["webhook"], webhook_url=webhook_server.url())
    with DEV_FULL.open("w") as full:
        child = subprocess.Popen(
            [sys.executable, "manage.py", "runtick", "--settings=tests.child_settings", "--loop", "0.2"],
            cwd=REPO,
            env=child_env(),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            webhook_server.wait_for(1, timeout=60)  # the first tick ran and delivered
            second = make_row(channels=["webhook"], webhook_url=webhook_server.url())
            webhook_server.wait_for(2, timeout=60)  # ...and the loop went on to the next
            child.send_signal(signal.SIGTERM)
            _, stderr = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)

    assert child.returncode == 0, stderr
    assert stderr.count("cannot write to stdout") == 1, stderr  # said once, not per line
    assert "Traceback" not in stderr, stderr
    assert second.pk is not None
