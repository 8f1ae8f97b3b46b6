"""Settings of the demo host project, read from the environment with django-environ.

Every value has a development default, so `manage.py migrate` and `manage.py runtick`
work on a fresh clone with no environment at all (SQLite file beside manage.py,
emails printed to the console). `.env.example` lists what can be set; `make run` copies
it to `.env` (git-ignored) on the first run.
"""

import shlex
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]"]),
    NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=(list, []),
)
# A .env file beside manage.py is optional; real environment variables win.
environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY", default="insecure-development-key-change-me")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_crontab",
    "notifications",
    "notifications_project",  # the demo project's own commands (manage.py demo); not part of the app
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "notifications_project.urls"
# The inbox page sends people without a session to a login: the demo has the admin's.
LOGIN_URL = "admin:login"

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
            ],
        },
    },
]

WSGI_APPLICATION = "notifications_project.wsgi.application"

# The demo database: the SQLite file beside manage.py, used while DATABASE_URL is unset (or empty).
DATABASE_URL = env.str("DATABASE_URL", default="")
DEMO_DATABASE = not DATABASE_URL
DATABASES = {"default": env.db_url_config(DATABASE_URL or f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Concurrent ticks on one host: WAL lets readers run beside the writer, IMMEDIATE
    # transactions take the write lock up front and the timeout makes a second writer
    # wait for it instead of failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # MariaDB/MySQL: every character (Django's default `utf8` is 3 bytes: notifications.W008),
    # unless the URL says otherwise (?charset=...).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("charset", "utf8mb4")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="notifications@localhost")
# A stuck SMTP server must not hold a tick's worker forever.
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)

LANGUAGE_CODE = "en-us"
TIME_ZONE = env("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Email attachments are kept through the default storage: an absolute path, so a tick run
# by cron from another directory finds what schedule() stored (not inside the app's package).
MEDIA_ROOT = env.path("MEDIA_ROOT", default=BASE_DIR / "media")

# Notifications: see the README's settings table. The webhook secret signs every
# webhook whose row has no secret of its own. While rotating, list the new key first:
# NOTIFICATIONS_WEBHOOK_SECRET="$NEW,$OLD" (commas or spaces between keys). Set but
# empty, `manage.py check` says so (notifications.E021).
DEVELOPMENT_WEBHOOK_SECRET = "whsec_ZGV2ZWxvcG1lbnQtb25seS1zZWNyZXQtY2hhbmdlLW1l"  # noqa: S105 - says so
NOTIFICATIONS_WEBHOOK_SECRET = [
    key
    for entry in env.list("NOTIFICATIONS_WEBHOOK_SECRET", default=[DEVELOPMENT_WEBHOOK_SECRET])
    for key in entry.split()
]
# Opens private ranges to webhooks on purpose (e.g. "127.0.0.0/8" for a local sink).
NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = env("NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS")
LOOPBACK = ["127.0.0.0/8", "::1/128"]
if DEBUG and DEMO_DATABASE:
    # A development checkout on the demo database: `manage.py demo`'s rows send to its
    # local sink, so a `manage.py runtick` after the demo stopped treats them as the demo
    # did (connection refused while the sink is down) instead of refusing loopback and
    # dead-lettering them as `blocked address`. Never with DEBUG off or another database.
    NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS += [n for n in LOOPBACK if n not in NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS]

# django-crontab: `python manage.py crontab add` installs one line that ticks every minute.
# Its output (one timestamped summary line per tick) is appended to TICK_LOG, so cron does
# not mail it to the local user every minute. notifications.cron.runtick runs the system
# checks itself (errors stop the tick, one line each; warnings stay out of the log), so
# `crontab run` skips them (--skip-checks). The settings read .env beside manage.py.
TICK_LOG = env.path("TICK_LOG", default=BASE_DIR / "runtick.log")
CRONJOBS = [
    ("* * * * *", "notifications.cron.runtick", f"--skip-checks >> {shlex.quote(str(TICK_LOG))} 2>&1"),
]
CRONTAB_LOCK_JOBS = False  # claims in the database, not a file lock, keep ticks apart
# Cron starts its jobs in $HOME: the tick runs from the project, as every other command does
# (a relative path anywhere in the settings then means the same file to the site and to cron).
CRONTAB_COMMAND_PREFIX = f"cd {shlex.quote(str(BASE_DIR))} &&"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"notifications": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")}},
}
