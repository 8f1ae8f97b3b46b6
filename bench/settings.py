"""Settings of the benchmark's throwaway site. Read only by bench/ processes.

The database comes from BENCH_DATABASE (JSON of a DATABASES entry, written by
bench/run.py for the throwaway database it created); BENCH_SETTINGS (JSON) overrides
single settings for one child process, e.g. NOTIFICATIONS_CHANNEL_TIMEOUT.
"""

import json
import os

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "notifications",
    "post_office",  # the peer in the email comparison
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": json.loads(os.environ["BENCH_DATABASE"])}

# Both queues send through the same do-nothing backend: the comparison is the queue.
EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"
DEFAULT_FROM_EMAIL = "bench@example.com"
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.dummy.EmailBackend"}}

NOTIFICATIONS_WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# The sink listens on loopback, which the webhook address guard refuses by default.
NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
NOTIFICATIONS_TICK_BUDGET = 600
NOTIFICATIONS_CHANNEL_TIMEOUT = 10

LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}

for _name, _value in json.loads(os.environ.get("BENCH_SETTINGS", "{}")).items():
    globals()[_name] = _value
