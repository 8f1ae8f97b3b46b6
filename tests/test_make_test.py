"""`make test` says where it is and ends with one table (suite, passed, failed, skipped, time).

The suites run side by side, each one's output in its log file: the terminal gets the
progress lines of `pytest --progress NAME` (tests/support/progress.py), and the closing
table is `.ci/test-table` reading each suite's JUnit XML.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.processes import REPO

TABLE = REPO / ".ci" / "test-table"

# The Makefile and the table, not the pass's database: once is enough, in the SQLite passes.
pytestmark = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
    reason="reads no database (make and its table); runs in the SQLite passes",
)


def junit(path: Path, tests: int, failures: int, errors: int, skipped: int, seconds: float) -> None:
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        f'<testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" tests="{tests}" '
        f'time="{seconds}"></testsuite></testsuites>'
    )


def table(results: Path, *suites: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TABLE), str(results), *suites], capture_output=True, text=True, timeout=60
    )


def test_the_table_has_a_line_per_suite_and_fails_when_one_failed(tmp_path):
    junit(tmp_path / "sqlite.xml", 2000, 0, 0, 12, 301.4)
    junit(tmp_path / "postgres.xml", 2000, 1, 1, 3, 488)
    (tmp_path / "postgres.log").write_text("...\nFAILED tests/test_a.py::test_b - AssertionError\nERROR tests/c.py\n")

    done = table(tmp_path, "sqlite", "postgres", "mariadb")

    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    assert lines[0].split() == ["suite", "|", "passed", "|", "failed", "|", "skipped", "|", "time"]
    assert lines[2].split(" | ") == ["sqlite  ", "  1988", "     0", "     12", "5m01s"]
    assert lines[3].split(" | ") == ["postgres", "  1995", "     2", "      3", "8m08s"]
    assert lines[4].split(" | ")[0] == "mariadb "  # no results: it stopped before the end
    assert f"mariadb: no results (it stopped before the end): see {tmp_path / 'mariadb'}.log" in done.stdout
    assert "  FAILED tests/test_a.py::test_b - AssertionError" in done.stdout


def test_the_table_passes_when_every_suite_did(tmp_path):
    junit(tmp_path / "sqlite.xml", 10, 0, 0, 1, 3)
    assert table(tmp_path, "sqlite").returncode == 0


@pytest.mark.slow
def test_a_suite_prints_its_progress_past_its_log(tmp_path):
    """What `make test` shows for a suite whose output goes to a file: a start, each
    failure as it happens, the end; the results in JUnit XML for the table.

    The suite run is this file's two table tests, one per worker: they need no test
    database, so the run costs pytest-xdist's start, not two migrated databases."""
    table_tests = (
        test_the_table_has_a_line_per_suite_and_fails_when_one_failed,
        test_the_table_passes_when_every_suite_did,
    )
    tests = [f"{__file__}::{test.__name__}" for test in table_tests]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *tests, "-n", "2", "--progress", "demo", f"--junitxml={tmp_path}/demo.xml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    progress = done.stderr.splitlines()
    assert progress[0].startswith("[demo] started: ") and progress[-1].startswith("[demo] finished, exit status 0: ")
    assert "2 passed" in done.stdout and "[demo]" not in done.stdout  # the log keeps pytest's own output
    assert table(tmp_path, "demo").returncode == 0


def test_make_test_runs_the_checks_after_a_failed_suite_and_prints_the_table():
    recipe = subprocess.run(
        ["make", "-n", "--no-print-directory", "test", "PY=python", "SUITES=sqlite"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    # The suites with -k (the others go on), then check whatever they did, then the table.
    assert "-k -j4" in recipe and "|| status=1" in recipe
    assert recipe.index("check &&") < recipe.index(".ci/test-table")
