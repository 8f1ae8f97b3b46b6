"""`pytest --progress NAME`: short progress lines for `make test`, whose suites run side by side.

Each suite's full output goes to its log file; what reaches the terminal is, prefixed with
the suite's name, a line when it starts, each failure as it happens, a count every
`EVERY` seconds and a line when it ends. Only the controlling process prints (under
pytest-xdist the workers' reports arrive there). Without the option nothing changes.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import pytest

EVERY = 30.0  # seconds between two count lines


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--progress",
        metavar="NAME",
        default=None,
        help="print short progress lines prefixed [NAME] to stderr, past output capture (make test)",
    )


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("progress")
    if name and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(Progress(config, name), "notifications-progress")


class Progress:
    """Counts the reports of one suite and says where it is."""

    def __init__(self, config: pytest.Config, name: str):
        self.config = config
        self.name = name
        self.started = time.monotonic()
        self.next_line = self.started + EVERY
        self.total: int | None = None
        self.outcomes: Counter[str] = Counter()

    def say(self, text: str) -> None:
        capture: Any = self.config.pluginmanager.getplugin("capturemanager")
        line = f"[{self.name}] {text} ({self.elapsed()})\n"
        if capture is None:
            sys.stderr.write(line)
        else:
            with capture.global_and_fixture_disabled():
                sys.stderr.write(line)
        sys.stderr.flush()

    def elapsed(self) -> str:
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        return f"{minutes}m{seconds:02d}s"

    def counts(self) -> str:
        done = sum(self.outcomes.values())
        of = f"/{self.total}" if self.total else ""
        parts = [f"{done}{of} done"] + [f"{n} {what}" for what, n in sorted(self.outcomes.items()) if what != "passed"]
        return ", ".join(parts)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.testscollected:  # without xdist; under it the workers collect
            self.total = session.testscollected
            self.say(f"started: {self.total} tests")

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.total is None:
            self.total = len(ids)
            self.say(f"started: {self.total} tests")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = None
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "skipped" if report.skipped else "passed" if report.passed else "failed"
            if report.when == "setup" and report.failed:
                outcome = "errors"
        elif report.when == "teardown" and report.failed:
            outcome = "errors"
        if outcome is None:
            return
        self.outcomes[outcome] += 1
        if outcome in ("failed", "errors"):
            self.say(f"{'FAILED' if outcome == 'failed' else 'ERROR'} {report.nodeid}")
        if time.monotonic() >= self.next_line:
            self.next_line = time.monotonic() + EVERY
            self.say(self.counts())

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.say(f"finished, exit status {int(exitstatus)}: {self.counts()}")
