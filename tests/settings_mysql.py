"""Test settings on the local MariaDB/MySQL (127.0.0.1:3306, user root, no password).

READ COMMITTED is Django's own default for MySQL, set here explicitly because the queue
relies on it: a locking read (the claim's SELECT ... FOR UPDATE SKIP LOCKED) under
REPEATABLE READ also takes gap locks over the due index's range, so concurrent claims and
schedule() calls block and deadlock on rows nobody holds; and a plain read inside a
transaction would keep seeing the snapshot of its first read (a key taken meanwhile, a
claim released meanwhile). utf8mb4: any Unicode a row carries (emoji in a subject)."""

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": "127.0.0.1",
        "PORT": 3306,
        "USER": "root",
        "PASSWORD": "",
        "NAME": "test",
        "OPTIONS": {"charset": "utf8mb4", "isolation_level": "read committed"},
        # One database per test run (pid), so runs side by side never share one.
        "TEST": {"NAME": f"test_notifications_{os.getpid()}", "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
    }
}
