"""Test settings: SQLite in a file (so subprocess ticks see the same database)."""

import os
import tempfile
import warnings
from pathlib import Path

# Warnings raised from the app itself (and the demo project) are errors: pytest's filterwarnings
# (pyproject.toml) says so for the test process, this for the ticks tests start as
# child processes with these settings.
warnings.filterwarnings("error", module=r"notifications(\.|$)")
warnings.filterwarnings("error", module=r"notifications_project(\.|$)")
# These settings configure mail the 5.2 way (EMAIL_BACKEND) on purpose; on Django 6.1+
# that is deprecated for the settings, not for the app. Django attributes the warning to
# whoever first reads the settings, which in a child process may be the app's import.
warnings.filterwarnings("ignore", message=r"The EMAIL_\w+ setting is deprecated", category=PendingDeprecationWarning)

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "notifications",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "notifications_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# One file per test run (pid), so runs side by side never share a database.
_DB_FILE = Path(tempfile.gettempdir()) / f"notifications-tests-{os.getpid()}.sqlite3"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_DB_FILE),
        "TEST": {"NAME": str(_DB_FILE)},
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        },
    }
}

# Attachments' content (notifications.models.attachments) goes to the default storage: a folder per run.
MEDIA_ROOT = Path(tempfile.gettempdir()) / f"notifications-tests-media-{os.getpid()}"

EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
DEFAULT_FROM_EMAIL = "queue@example.com"

NOTIFICATIONS_WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks test vector's
NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
NOTIFICATIONS_CHANNEL_TIMEOUT = 2
NOTIFICATIONS_CONCURRENCY = 8
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
