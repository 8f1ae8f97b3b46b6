"""Tasks per second: `runtick` (notifications.tasks.QueueBackend) beside django-tasks-db's
`db_worker`, on the same machine and database, in one run (Django 6.0+, django-tasks-db).

    python bench/tasks_vs_db_worker.py [--tasks 2000] [--processes 4]      # SQLite, a fresh file
    DATABASE_URL=postgres://... python bench/tasks_vs_db_worker.py            # PostgreSQL

Each side gets the same tasks (`tests.support.task_functions.add`), all due, and as many
processes: `runtick --budget 600` against `db_worker --batch`. Timed from the processes'
start to the last one's exit, after checking every task finished SUCCESSFUL. Alternates
which side goes first over `--repeats` rounds: absolute figures drift on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TASKS = {
    "default": {"BACKEND": "notifications.tasks.QueueBackend"},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}


def database() -> dict:
    url = os.environ.get("DATABASE_URL")
    if url:
        import environ

        return environ.Env.db_url_config(url)
    path = Path(tempfile.mkdtemp()) / "tasks-bench.sqlite3"
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE", "timeout": 30},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    options = parser.parse_args()

    env = dict(os.environ)
    env["NOTIFICATIONS_TEST_DATABASE"] = json.dumps(database())
    env["NOTIFICATIONS_TEST_SETTINGS"] = json.dumps(
        {
            "TASKS": TASKS,
            "NOTIFICATIONS_CHANNEL_TIMEOUT": 30,  # the default is 10; the tests set 2, too short on a loaded SQLite
            "INSTALLED_APPS": [
                "django.contrib.auth",
                "django.contrib.contenttypes",
                "django.contrib.admin",
                "django.contrib.sessions",
                "django.contrib.messages",
                "notifications",
                "django_tasks_db",
            ],
        }
    )
    env["DJANGO_SETTINGS_MODULE"] = "tests.child_settings"
    os.environ.update(env)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, transaction
    from django_tasks_db.models import DBTaskResult

    from notifications.models import TaskRun
    from tests.support.task_functions import add

    call_command("migrate", verbosity=0)
    manage = [sys.executable, "manage.py"]
    commands = {
        "runtick": [*manage, "runtick", "--budget", "600"],
        "db_worker": [*manage, "db_worker", "--batch", "--backend", "db", "--no-startup-delay", "--queue-name", "*"],
    }
    figures: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(options.repeats):
        order = list(commands) if round_ % 2 == 0 else list(commands)[::-1]
        for name in order:
            backend = "default" if name == "runtick" else "db"
            with transaction.atomic():
                results = [add.using(backend=backend).enqueue(n, 1) for n in range(options.tasks)]
            connection.close()
            started = time.monotonic()
            procs = [
                subprocess.Popen(commands[name], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
                for _ in range(options.processes)
            ]
            codes = [p.wait(900) for p in procs]
            elapsed = time.monotonic() - started
            assert codes == [0] * options.processes, codes
            model = TaskRun if name == "runtick" else DBTaskResult
            done = model.objects.filter(pk__in=[r.id for r in results], status="SUCCESSFUL").count()
            assert done == options.tasks, f"{name}: {done} of {options.tasks} SUCCESSFUL"
            figures[name].append(options.tasks / elapsed)
            rate = options.tasks / elapsed
            print(f"{name}: {options.tasks} tasks, {options.processes} processes, {elapsed:.2f}s, {rate:.0f} tasks/s")
    vendor = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print("| database | runtick tasks/s | db_worker tasks/s |\n|---|---|---|")
    print(f"| {vendor} | {max(figures['runtick']):.0f} | {max(figures['db_worker']):.0f} |")


if __name__ == "__main__":
    main()
