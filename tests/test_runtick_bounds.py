"""`runtick` refuses option values no tick can use, with a usage error instead of a traceback:
`--budget 1e308` gave an OverflowError, `--dry-run --limit 99999999999999999999` PostgreSQL's
`bigint out of range`."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "1e308"], "--budget: must be a finite number of seconds from 0 to 86400"),
        (["--budget", "inf"], "--budget: must be a finite number of seconds from 0 to 86400"),
        (["--dry-run", "--limit", "99999999999999999999"], "--limit: must be from 1 to 1,000,000"),
        (["--limit", "0"], "--limit: must be from 1 to 1,000,000"),
    ],
)
def test_out_of_range_options_are_usage_errors(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("runtick", *args)


def test_the_bounds_themselves_run(capsys):
    call_command("runtick", "--dry-run", "--limit", "1000000")
    call_command("runtick", "--budget", "86400", "--limit", "5")
    assert "claimed=0" in capsys.readouterr().out
