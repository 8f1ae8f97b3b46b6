"""Test settings on the local PostgreSQL (127.0.0.1:5432, user postgres, trust auth)."""

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": "127.0.0.1",
        "PORT": 5432,
        "USER": "postgres",
        "NAME": "test",
        # One database per test run (pid), so runs side by side never share one.
        "TEST": {"NAME": f"test_notifications_{os.getpid()}"},
    }
}
