"""Concurrent `schedule(key=...)` calls in real processes leave exactly one row, on
SQLite (a file) and PostgreSQL, whatever `on_conflict` says.

Four children are held at the database's write lock (`claim_gate`) after each has looked
for the key and found none, so all four insert at once when the gate opens: one insert
wins, and the other three are refused by the key's unique constraint and apply their
policy to the winner's row.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection

from notifications.models import Notification
from notifications.models.validation import KEY_TAKEN
from tests.support.processes import REPO, child_env, claim_gate

PROCESSES = 4
KEY = "invoice-7-reminder"
WAIT = 90  # seconds; generous, the machine is shared

pytestmark = [pytest.mark.slow, pytest.mark.multi_process, pytest.mark.django_db(transaction=True)]


class Child:
    """One `python -m tests.support.schedule_child` process; its stdout lines are collected as they come."""

    def __init__(self, arguments: dict) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.schedule_child", json.dumps(arguments)],
            cwd=REPO,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.closed = False  # stdout ended: the child exited
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def wait_for(self, prefix: str) -> str:
        deadline = time.monotonic() + WAIT
        with self.changed:
            while True:
                found = [line for line in self.lines if line.startswith(prefix)]
                if found:
                    return found[0]
                if self.closed:
                    raise AssertionError(f"child exited before {prefix!r}: {self.lines}\n{self.proc.stderr.read()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"child: no {prefix!r} within {WAIT}s: {self.lines}")
                self.changed.wait(0.2)

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        return json.loads(self.wait_for("result ").removeprefix("result "))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def race(on_conflict: str) -> list[dict]:
    """Four children call schedule() with one key at once; their results, in start order."""
    children = [
        Child(
            {
                "channels": ["webhook"],
                "webhook_url": f"https://example.com/hooks/{n}",
                "key": KEY,
                "on_conflict": on_conflict,
            }
        )
        for n in range(PROCESSES)
    ]
    try:
        for child in children:
            child.wait_for("ready")
        with claim_gate():  # holds the lock every insert needs
            for child in children:
                child.go()
            for child in children:
                child.wait_for("write ")  # looked for the key, found none, now waits to write
        results = [child.result() for child in children]
        # Each looked for the key before any insert could commit, so each tried to insert
        # it: three were refused by the constraint, not by the look.
        assert all("write INSERT" in child.lines for child in children), [c.lines for c in children]
        for child in children:
            assert child.proc.wait(WAIT) == 0, child.proc.stderr.read() if child.proc.stderr else ""
        return results
    finally:
        for child in children:
            child.kill()


def test_error_one_wins_the_others_get_a_validation_error_on_key(capsys):
    started = time.monotonic()
    results = race("error")

    winners = [r for r in results if "pk" in r]
    assert len(winners) == 1, results
    assert [r["error"] for r in results if "error" in r] == [{"key": [KEY_TAKEN]}] * (PROCESSES - 1)
    assert list(Notification.objects.values_list("pk", "key")) == [(winners[0]["pk"], KEY)]
    report(capsys, "error", started)


# Through the pooler: the refused insert of each on_conflict path the children take, "error"
# above and "replace" here ("keep" answers with the row "replace" would have found).
@pytest.mark.multi_process(pooled={"on_conflict": "replace"})
@pytest.mark.parametrize("on_conflict", ["replace", "keep"])
def test_replace_and_keep_all_get_the_one_row(on_conflict, capsys):
    started = time.monotonic()
    results = race(on_conflict)

    assert [r.get("error") for r in results] == [None] * PROCESSES, results
    row = Notification.objects.get()
    assert row.key == KEY
    assert {r["pk"] for r in results} == {row.pk}
    urls = {r["webhook_url"] for r in results}
    if on_conflict == "keep":
        assert urls == {row.webhook_url}  # everyone got the winner's row, unchanged
    else:
        assert row.webhook_url in urls  # the last replace wins whole
    report(capsys, on_conflict, started)


def report(capsys, on_conflict: str, started: float) -> None:
    with capsys.disabled():
        print(
            f"\n[key race] {connection.vendor}: on_conflict={on_conflict!r}, {PROCESSES} processes, "
            f"{time.monotonic() - started:.2f}s from start to the last exit"
        )
