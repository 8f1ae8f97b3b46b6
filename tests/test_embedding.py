"""The README's "Embedding in an existing site", executed on a fresh `startproject`.

The section's fenced code blocks are applied in order, as a reader would: each `python`
block appended to the fresh project's settings, each `sh` block run in the project
directory, the `cron` line run as cron runs it. The project is made by the Django of the
running interpreter, so `.venv` covers Django 5.2 and the tox `django6` leg 6.x. Then
`migrate`, `check`, `schedule()` and the tick (through the cron line that `crontab add`
wrote, and the plain cron line) run in subprocesses, with the secret, and without it.

Stand-ins, each for something a test cannot do to the machine: the install step's `pip
install` is a link to the checkout's app in the project directory (the wheel's install
is tests/test_wheel.py's), `crontab(1)` is a script that keeps the table in a file, and
the plain cron line's `/srv/site` and `.venv/bin/python` are this project and this
interpreter. The test's own settings (that stand-in crontab, loopback opened to the
local webhook receiver) are appended before the README's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import django
import pytest
from django.conf import settings
from standardwebhooks import Webhook

from tests.support.servers import WebhookServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
        reason="builds its own SQLite project, whatever the pass's database; runs in the SQLite passes",
    ),
]

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Embedding in an existing site"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w+)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"
SUMMARY = re.compile(rf"^{STAMP} claimed=(\d+) succeeded=(\d+) partial=0 retried=0 dead_lettered=0 .*seconds=")
HELD = re.compile(rf"^{STAMP} 1 held: webhook: no signing secret configured .*\(this process's settings; ")
# What cron gives a job: no environment of the user's shell, the home directory as cwd.
CRON_PATH = "/usr/bin:/bin"


@dataclass
class Block:
    lang: str
    body: str


def embedding_blocks() -> list[Block]:
    """The fenced code blocks of the README's embedding section, in order, dedented."""
    readme = (REPO / "README.md").read_text()
    start = readme.index(SECTION)
    end = readme.index("\n## ", start + len(SECTION))
    blocks = []
    for match in FENCE.finditer(readme[start:end]):
        indent = len(match["indent"])
        body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
        blocks.append(Block(match["lang"], body))
    return blocks


class Site:
    """A fresh `startproject` in `root`, and the ways the README's steps run there."""

    def __init__(self, root: Path):
        self.dir = root / "site"
        self.home = root / "home"  # cron's working directory
        self.bin = root / "bin"
        self.crontab_file = root / "crontab.table"
        self.log = self.dir / "runtick.log"
        self.cron_lines: list[str] = []  # the section's plain crontab lines
        for folder in (self.dir, self.home, self.bin):
            folder.mkdir()
        self.run([sys.executable, "-m", "django", "startproject", "mysite", str(self.dir)], check=True)
        self.settings = self.dir / "mysite" / "settings.py"
        self.fresh_settings = self.settings.read_text()
        (self.dir / "notifications").symlink_to(REPO / "notifications")  # `pip install` stand-in
        # `python` in the README's shell steps, and the plain cron line's .venv/bin/python.
        for wrapper in (self.bin / "python", self.dir / ".venv" / "bin" / "python"):
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
            wrapper.chmod(0o755)
        crontab = self.bin / "crontab"  # crontab(1): -l lists the table, a file argument replaces it
        table = shlex.quote(str(self.crontab_file))
        crontab.write_text(f'#!/bin/sh\nif [ "$1" = -l ]; then cat {table} 2>/dev/null; else cp "$1" {table}; fi\n')
        crontab.chmod(0o755)

    def append_settings(self, text: str) -> None:
        with self.settings.open("a") as file:
            file.write("\n" + text)

    def env(self, **extra: str) -> dict[str, str]:
        """A login shell's environment of the site's user: no secret unless the steps read it."""
        return {"PATH": f"{self.bin}:{CRON_PATH}", "HOME": str(self.home), "LANG": "C.UTF-8", **extra}

    def run(self, command: list[str], *, cwd: Path | None = None, check: bool = False, **extra: str):
        result = subprocess.run(
            command,
            cwd=cwd or self.dir,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
        return result

    def shell(self) -> Shell:
        return Shell(self.dir, self.env())

    def manage(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return self.run([sys.executable, "manage.py", *args], **extra)

    def as_cron(self, command: str) -> subprocess.CompletedProcess[str]:
        """Run a crontab line's command as cron does: /bin/sh, a bare environment, in $HOME."""
        env = {"PATH": CRON_PATH, "HOME": str(self.home), "SHELL": "/bin/sh", "LOGNAME": "site"}
        return subprocess.run(
            ["/bin/sh", "-c", command], cwd=self.home, env=env, capture_output=True, text=True, timeout=120
        )

    def installed_cron_command(self) -> str:
        """The command of the one line `crontab add` installed (the five time fields and comment cut)."""
        (line,) = [line for line in self.crontab_file.read_text().splitlines() if line.strip()]
        fields = line.split(None, 5)
        assert fields[:5] == ["*"] * 5, line
        return fields[5].rsplit(" # ", 1)[0]

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def schedule_webhook(self, url: str) -> int:
        script = f"from notifications.api import schedule as s; print(s(channels=['webhook'], webhook_url={url!r}).pk)"
        result = self.manage("shell", "-c", script)
        assert result.returncode == 0, result.stderr
        return int(result.stdout.split()[-1])


class Shell:
    """One shell session in the project directory: the reader's terminal, into which each
    `sh` block's lines are pasted one after another (what a line sets stays set)."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.outputs = cwd.parent / "shell-output"
        self.proc = subprocess.Popen(
            ["/bin/sh"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def paste(self, block: Block) -> list[tuple[str, str, str]]:
        """Run the block's commands one line at a time; each must succeed. Returns (line, stdout, stderr)."""
        ran = []
        for line in block.body.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            out, err = self.outputs.with_suffix(".out"), self.outputs.with_suffix(".err")
            assert self.proc.stdin and self.proc.stdout
            # A brace group runs in this shell (no subshell): `set -a; . ./.env` stays in force.
            self.proc.stdin.write(f'{{\n{line}\n}} >{out} 2>{err}; echo "rc=$?"\n')
            self.proc.stdin.flush()
            status = self.proc.stdout.readline().strip()
            result = (line, out.read_text(), err.read_text())
            assert status == "rc=0", f"{line!r} failed ({status}):\n{result[1]}{result[2]}"
            assert "Traceback" not in result[2], result[2]
            ran.append(result)
        return ran

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def apply(site: Site, shell: Shell, block: Block) -> list[tuple[str, str, str]]:
    """Apply one of the section's blocks as its reader would; returns what a shell step printed."""
    if block.lang == "python":
        site.append_settings(block.body)
        return []
    if block.lang == "cron":
        site.cron_lines.append(block.body.strip())
        return []
    assert block.lang == "sh", block.lang
    if block.body.lstrip().startswith("pip install"):
        assert '"/path/to/checkout[crontab]"' in block.body  # django-crontab comes with the app's extra
        return []  # the app is linked into the project instead (module docstring)
    return shell.paste(block)


@pytest.fixture(scope="module")
def receiver():
    server = WebhookServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    """The fresh project with every step of the section applied, in order."""
    site = Site(tmp_path_factory.mktemp("embedding"))
    site.append_settings(
        "# The test's own: crontab(1)'s stand-in, and loopback open to the test's webhook receiver.\n"
        f"CRONTAB_EXECUTABLE = {str(site.bin / 'crontab')!r}\n"
        'NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]\n'
    )
    blocks = embedding_blocks()
    assert [b.lang for b in blocks] == ["sh", "python", "sh", "python", "sh", "python", "sh", "cron"]
    install, configure, env_file, mail_timeout, migrate_and_check, cronjobs, crontab_add, plain_line = blocks
    shell = site.shell()
    try:
        for block in (install, configure, env_file):
            apply(site, shell, block)
        if django.VERSION >= (6, 1):
            # The README's word: a fresh 6.1+ project defines MAILERS (console), where EMAIL_* is refused.
            assert "MAILERS = {" in site.fresh_settings and "console.EmailBackend" in site.fresh_settings
        else:
            assert "EMAIL_TIMEOUT" in mail_timeout.body
            apply(site, shell, mail_timeout)
        ran = apply(site, shell, migrate_and_check)
        site.check_output = next(err for line, _, err in ran if line.endswith("manage.py check"))
        for block in (cronjobs, crontab_add, plain_line):
            apply(site, shell, block)
    finally:
        shell.close()
    return site


def secret_of(site: Site) -> str:
    (line,) = (site.dir / ".env").read_text().splitlines()
    name, value = line.split("=", 1)
    assert name == "NOTIFICATIONS_WEBHOOK_SECRET"
    return value


def test_the_steps_make_a_working_site(site):
    assert (site.dir / ".env").stat().st_mode & 0o077 == 0  # readable by its owner alone
    assert secret_of(site).startswith("whsec_")
    assert site.crontab_file.exists(), "crontab add installed nothing"
    assert secret_of(site) not in site.crontab_file.read_text()  # the secret stays out of the crontab

    # `check` passes, warning about what a fresh project should fix before production.
    warnings = set(re.findall(r"\((notifications\.\w+)\)", site.check_output))
    assert "notifications.W004" in warnings and warnings <= {"notifications.W003", "notifications.W004"}, (
        site.check_output
    )
    assert "ERRORS" not in site.check_output


def test_the_installed_cron_line_ticks_with_only_timestamped_summaries_in_its_log(site, receiver):
    row = site.schedule_webhook(receiver.url(f"/embedded/{django.get_version()}"))

    command = site.installed_cron_command()
    assert "runtick" not in command or "--skip-checks" in command
    first = site.as_cron(command)
    second = site.as_cron(command)

    assert (first.returncode, first.stdout, first.stderr) == (0, "", "")  # all of it went to the log
    assert second.returncode == 0
    lines = site.log_lines()
    assert len(lines) == 2 and all(SUMMARY.match(line) for line in lines), lines
    assert SUMMARY.match(lines[0]).groups() == ("1", "1")  # the row went out, signed with the .env secret
    assert SUMMARY.match(lines[1]).groups() == ("0", "0")
    (received,) = [r for r in receiver.received if r.path.startswith("/embedded/")]
    payload = Webhook(secret_of(site)).verify(received.body, received.headers)
    assert payload["notification_id"] == row

    # The plain crontab line of step 4 ticks too, into the same log.
    (plain,) = site.cron_lines
    fields = plain.split(None, 5)
    assert fields[:5] == ["*"] * 5
    command = fields[5].replace("/srv/site", str(site.dir))
    result = site.as_cron(command)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    lines = site.log_lines()
    assert len(lines) == 3 and SUMMARY.match(lines[2]), lines


def test_a_missing_secret_stops_no_command_and_holds_only_webhooks(site, receiver):
    # Commands run without the environment file (CI, an IDE, a shell without .env): the
    # variable is missing. On a site that sends only email nothing is in the way.
    for command in (["migrate", "--no-input"], ["check"]):
        done = site.manage(*command)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "Traceback" not in done.stderr
    checked = site.manage("check")
    assert "notifications.W010" in checked.stderr  # said, as a warning

    # The tick sends what it can sign (a row with its own key) and holds the webhook that
    # needs the site's, saying so in a line of its own.
    own_key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    url = receiver.url("/signed-with-its-own-key")
    script = (
        "from notifications.api import schedule as s; "
        f"s(channels=['webhook'], webhook_url={url!r}, webhook_secret={own_key!r})"
    )
    assert site.manage("shell", "-c", script).returncode == 0
    held = [site.schedule_webhook(receiver.url("/held-by-runtick"))]
    ticked = site.manage("runtick")
    assert ticked.returncode == 0, ticked.stderr
    summary, line = ticked.stdout.splitlines()
    assert re.match(rf"^{STAMP} claimed=2 succeeded=1 .* deferred=1 ", summary), summary
    assert HELD.match(line), line
    paths = [r.path for r in receiver.received]
    assert "/signed-with-its-own-key" in paths and "/held-by-runtick" not in paths
    held.append(site.schedule_webhook(receiver.url("/held-by-cron")))

    # The cron job with the variable blank in its environment file: the summary and that line.
    env_file = site.dir / ".env"
    kept = env_file.read_text()
    before = site.log_lines()
    try:
        env_file.write_text("NOTIFICATIONS_WEBHOOK_SECRET=\n")
        result = site.as_cron(site.installed_cron_command())
    finally:
        env_file.write_text(kept)
    assert (result.returncode, result.stderr) == (0, "")
    added = site.log_lines()[len(before) :]
    assert len(added) == 2 and SUMMARY.match(added[0]) and HELD.match(added[1]), added
    gone = f"from notifications.models import Notification; Notification.objects.filter(pk__in={held}).delete()"
    assert site.manage("shell", "-c", gone).returncode == 0

    # The admin says webhooks wait for a key.
    site.schedule_webhook(receiver.url("/held"))
    script = (
        "from django.test.utils import setup_test_environment; setup_test_environment()\n"
        "from django.contrib.auth.models import User; from django.test import Client\n"
        "client = Client(); client.force_login(User.objects.create_superuser('ops', 'ops@example.com', 'x'))\n"
        "print(client.get('/admin/notifications/notification/').content.decode())\n"
    )
    page = site.manage("shell", "-c", script)
    assert page.returncode == 0, page.stderr
    assert "Webhooks are held: no signing secret configured" in page.stdout
