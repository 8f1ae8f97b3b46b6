"""A `schedule()` child process against the test database, for the key race.

Run as `python -m tests.support.schedule_child '<json>'` with the environment of
`tests.support.processes.child_env()`; the JSON holds `schedule()`'s keyword arguments. The child
reports on stdout, one line each: `ready` once Django is set up and connected, then
`write <SQL verb>` as it sends each statement that writes (so a test holding the
database's write lock knows the child got that far), and finally `result <json>`: the
row it got back (`pk`, `webhook_url`) or the `ValidationError` it raised. It calls
`schedule()` when a line arrives on stdin: the test's starting gun.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

WRITES = ("INSERT", "UPDATE", "DELETE", "BEGIN", "SAVEPOINT")


def report(line: str) -> None:
    print(line, flush=True)


def announce_writes(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    if verb in WRITES:
        report(f"write {verb}")
    return execute(sql, params, many, context)


def main() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.child_settings"
    import django

    django.setup()
    from django.core.exceptions import ValidationError
    from django.db import connection

    from notifications.api import schedule

    arguments = json.loads(sys.argv[1])
    connection.ensure_connection()
    report("ready")
    sys.stdin.readline()
    with connection.execute_wrapper(announce_writes):
        try:
            row = schedule(**arguments)
        except ValidationError as exc:
            report("result " + json.dumps({"error": exc.message_dict}))
            return
    report("result " + json.dumps({"pk": row.pk, "webhook_url": row.webhook_url}))


if __name__ == "__main__":
    main()
