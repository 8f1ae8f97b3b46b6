"""Settings of the benchmark's throwaway site. Read only by bench/ processes.

The database comes from BENCH_DATABASE (JSON of a DATABASES entry, written by
bench/run.py for the throwaway database it created); BENCH_SETTINGS (JSON) overrides
single settings for one child process, e.g. NOTIFICATIONS_CHANNEL_TIMEOUT.
"""

import json
import os
import tempfile

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin",  # the actions scenario's select-all goes through the admin too
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "notifications",
    "post_office",  # the peer in the email comparison
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "bench.urls"
ALLOWED_HOSTS = ["testserver"]  # the actions scenario's test client
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": json.loads(os.environ["BENCH_DATABASE"])}

# Both queues send through the same do-nothing backend: the comparison is the queue.
EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"
DEFAULT_FROM_EMAIL = "bench@example.com"
# Attachments at an absolute path, as every ticking process must find them (notifications.E028).
MEDIA_ROOT = os.path.join(tempfile.gettempdir(), f"notifications-bench-media-{os.getuid()}")
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.dummy.EmailBackend"}}

NOTIFICATIONS_WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# The sink listens on loopback, which the webhook address guard refuses by default.
NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
NOTIFICATIONS_TICK_BUDGET = 600
NOTIFICATIONS_CHANNEL_TIMEOUT = 10

LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}

for _name, _value in json.loads(os.environ.get("BENCH_SETTINGS", "{}")).items():
    globals()[_name] = _value
