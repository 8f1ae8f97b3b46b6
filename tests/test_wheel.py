"""The wheel, as a new user meets it: pip install into a fresh virtualenv, a fresh
`django-admin startproject`, add the app, migrate, schedule, tick, see the email.

Runs once per interpreter (the SQLite pass): it builds its own project and database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.conf import settings

import notifications

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
        reason="builds its own SQLite project; runs once, in the SQLite pass",
    ),
]


def run(*args: str | Path, cwd: Path | None = None, timeout: float = 600, status: int = 0) -> str:
    """Run a command as a user's shell would: no test settings, no repo on the path."""
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == status, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, REPO)
    (built,) = dist.glob("*.whl")
    return built


def test_the_wheel_holds_the_app_alone(wheel):
    assert wheel.name == f"django_notification_queue-{notifications.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in [
        "notifications/py.typed",
        "notifications/migrations/0001_initial.py",
        "notifications/templates/notifications/admin/purge_confirmation.html",
        "notifications/management/commands/runtick.py",
        "notifications/testing.py",
    ]:
        assert shipped in names
    # Everything the app's folder holds ships (templates, static files, migrations ...), nothing else.
    app_files = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "notifications").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert app_files - names == set()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"notifications", f"django_notification_queue-{notifications.__version__}.dist-info"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    metadata = (
        zipfile.ZipFile(wheel)
        .read(f"django_notification_queue-{notifications.__version__}.dist-info/METADATA")
        .decode()
    )
    requires = sorted(
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    )
    assert "django<7,>=5.2" in requires
    assert not [r for r in requires if r.startswith("django-environ")]  # the demo project's, not the app's


def test_a_fresh_project_installs_migrates_schedules_and_delivers(wheel, tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheel)

    site = tmp_path / "site"
    site.mkdir()
    run(venv / "bin" / "django-admin", "startproject", "mysite", site)
    settings_py = site / "mysite" / "settings.py"
    settings_py.write_text(settings_py.read_text() + '\nINSTALLED_APPS += ["notifications"]\n')

    # Django 6.1's project template configures MAILERS (console); older ones default to SMTP.
    on_mailers = "MAILERS" in settings_py.read_text()

    # Before any further settings: the checks point at what a production site must set.
    # A fresh project keeps files under each process's working directory (MEDIA_ROOT unset):
    # attachments stored there are not found by a tick cron starts elsewhere. A warning: only
    # email with attachments needs it (held until it is set), so `check` passes.
    checked = run(python, "manage.py", "check", cwd=site)
    assert "(notifications.W028) Email attachments are kept in the storage 'default'" in checked
    assert "whose location (MEDIA_ROOT) is unset" in checked
    assert "(notifications.W004) The queue's SQLite database ('default') is not in WAL mode" in checked
    smtp_warning = "(notifications.W002) EMAIL_TIMEOUT is not set while the SMTP email backend is in use"
    assert (smtp_warning in checked) is not on_mailers

    more = 'DATABASES["default"]["OPTIONS"] = {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 30}\n'
    more += 'MEDIA_ROOT = BASE_DIR / "media"\n'
    if not on_mailers:
        more += 'EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"\n'
    settings_py.write_text(settings_py.read_text() + more)
    assert "System check identified no issues" in run(python, "manage.py", "check", cwd=site)
    run(python, "manage.py", "migrate", "--no-input", cwd=site)
    assert "No changes detected" in run(python, "manage.py", "makemigrations", "--check", "--dry-run", cwd=site)

    installed = run(python, "-c", "import notifications; print(notifications.__file__)", cwd=site)
    assert str(venv) in installed  # the wheel's copy, not the checkout's
    template = run(
        python,
        "manage.py",
        "shell",
        "-c",
        "from django.template.loader import get_template; "
        "print(get_template('notifications/admin/purge_confirmation.html').origin.name)",
        cwd=site,
    )
    assert str(venv) in template

    run(
        python,
        "manage.py",
        "shell",
        "-c",
        "from notifications.api import schedule; "
        "schedule(channels=['email'], email_to='ada@example.com', subject='Hello {{ name }}', "
        "body='Your wheel works.', payload={'name': 'Ada'})",
        cwd=site,
    )
    ticked = run(python, "manage.py", "runtick", cwd=site)

    assert "Subject: Hello Ada" in ticked
    assert "To: ada@example.com" in ticked
    assert "Your wheel works." in ticked
    assert "claimed=1 succeeded=1 partial=0 retried=0 dead_lettered=0" in ticked
    left = run(
        python,
        "manage.py",
        "shell",
        "-c",
        "from notifications.models import Notification as N; print(N.objects.count())",
        cwd=site,
    )
    assert left.splitlines()[-1] == "0"  # delivered one-shots are deleted
