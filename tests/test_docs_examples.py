"""Every fenced code block of README.md and docs/*.md runs in a test, or says why not.

Each page's blocks run in order in one fresh namespace, as a reader pastes them into one
project: a `python` block is executed, and the settings it assigns (upper-case names) are
applied with `override_settings` for the rest of the page and must pass the system checks;
a block that defines `urlpatterns` becomes the URLconf. A `sh` block's `python manage.py`
lines run as management commands against the test database, its `python -c` lines in a
subprocess, and its `NAME=value` lines (the demo project's `.env`) are read by the demo
project's settings. A `django` block is compiled and rendered as a template; a `json`
block is parsed.

The README's "Embedding in an existing site" is tests/test_embedding.py's (it applies
those blocks to a fresh `startproject`), and the from-scratch Slack channel's tests in
docs/channels.md are tests/test_slack_webhook_example.py: both are checked to be what
those tests run. A block that cannot run (a crontab line, an output sample, a `pip
install` of the checkout) carries `<!-- not run: why -->` on the line before its fence.

What a page leaves to the reader's own code (`user`, `alert()`, `handle()`, the raw
`body` and `headers` of a received webhook, the environment's secrets, a `myapp.channels`
module and the templates a row names) is given by `HostCode` below: stand-ins, not
corrections of the docs.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shlex
import subprocess
import sys
import types
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import django
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core import checks
from django.core.management import call_command
from django.template import engines
from django.test import Client, RequestFactory, override_settings
from django.urls import clear_url_caches, resolve, reverse
from django.utils import timezone
from standardwebhooks import Webhook

from notifications.api import schedule
from notifications.channels import Channel, ChannelResult
from notifications.models import Notification
from notifications.recipients import views
from tests.test_embedding import embedding_blocks

REPO = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
# A fence at any indentation, also inside a block quote (`> ```python`).
FENCE = re.compile(r"^(?P<indent>[ >]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!-- not run: (?P<why>[^<>]*\S)\s*-->")
# `<!-- Django 6.1+ -->`: a block for newer Djangos only (MAILERS), run where the Django is.
NEWER_DJANGO = re.compile(r"<!-- Django (?P<major>\d+)\.(?P<minor>\d+)\+ -->")
RUNNABLE = {"python", "sh", "django", "json"}
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the test's own key: base64 of 24 bytes
OTHER_SECRET = "whsec_" + "C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


@dataclass
class Block:
    page: str
    line: int
    lang: str
    body: str
    not_run: str | None  # the reason its marker gives
    needs_django: tuple[int, int] = (0, 0)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def page_blocks(page: str) -> list[Block]:
    return parse_blocks(page, (REPO / page).read_text())


def parse_blocks(page: str, text: str) -> list[Block]:
    blocks = []
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        newer = NEWER_DJANGO.search(before)
        needs = (int(newer["major"]), int(newer["minor"])) if newer else (0, 0)
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(page, line, match["lang"], body, marker["why"] if marker else None, needs))
    return blocks


def _after_docstring(path: Path) -> str:
    text = path.read_text()
    return text[text.index('"""', 3) + 3 :].lstrip("\n")


def run_elsewhere(block: Block) -> str | None:
    """The test that runs `block` as it stands, if another test does."""
    if block.page == "README.md" and block.body in [b.body for b in embedding_blocks()]:
        return "tests/test_embedding.py"
    if block.page == "docs/channels.md":
        example_tests = REPO / "tests" / "test_slack_webhook_example.py"
        if block.body == _after_docstring(example_tests):
            return "tests/test_slack_webhook_example.py"
    return None


def test_every_block_runs_or_says_why_not():
    forgotten = [
        f"{b.where} ({b.lang or 'no language'})"
        for page in PAGES
        for b in page_blocks(page)
        if b.not_run is None and b.lang not in RUNNABLE and run_elsewhere(b) is None
    ]
    assert forgotten == [], "mark each with <!-- not run: why --> or make it run"


def test_a_marker_counts_on_the_line_before_its_fence_only():
    text = (
        "<!-- not run: output sample -->\n```text\nclaimed=1\n```\n\n"
        "<!-- not run: too far away -->\n\nSome prose.\n\n```python\nX = 1\n```\n\n"
        "1. A step:\n\n   <!-- Django 6.1+ -->\n   ```python\n   MAILERS = {}\n   ```\n\n"
        "> ```sh\n> python manage.py runtick\n> ```\n"
    )
    marked, unmarked, newer, quoted = parse_blocks("page.md", text)
    assert (marked.lang, marked.not_run, marked.line) == ("text", "output sample", 2)
    assert (unmarked.body, unmarked.not_run) == ("X = 1\n", None)
    assert (newer.body, newer.needs_django, newer.not_run) == ("MAILERS = {}\n", (6, 1), None)
    assert quoted.body == "python manage.py runtick\n"


def test_the_slack_channel_of_the_docs_is_the_one_the_suite_runs():
    (block,) = [b for b in page_blocks("docs/channels.md") if "class SlackWebhookChannel" in b.body]
    assert block.body == _after_docstring(REPO / "tests" / "support" / "slack_webhook.py")
    assert any(run_elsewhere(b) for b in page_blocks("docs/channels.md"))


# The reader's own code that the pages leave out ---------------------------------------


class StandInChannel(Channel):
    """A channel of the reader's own (`myapp.channels.SMSChannel`): every send succeeds."""

    def deliver(self, firing: Any) -> ChannelResult:
        return ChannelResult(self.name)


@dataclass
class HostCode:
    """Names a page leaves to the reader's code, and what they recorded."""

    root: Path
    alerts: list[str] = field(default_factory=list)
    handled: list[tuple[Any, ...]] = field(default_factory=list)
    page_namespace: dict[str, Any] = field(default_factory=dict)

    def names(self) -> dict[str, Any]:
        user = User.objects.create(username="ada", email="ada@example.com", first_name="Ada")
        body, headers = self.received_webhook()
        return {
            "BASE_DIR": self.root,  # what a settings module has
            "env": self.env,
            "user": user,
            "users": [user],
            "due_date": timezone.now() + timedelta(days=30),
            "start": timezone.now() + timedelta(days=2),
            "pdf_bytes": b"%PDF-1.4\n%%EOF\n",
            "alert": self.alerts.append,
            "handle": lambda *args: self.handled.append(args),
            "sign_up": self.sign_up,
            "body": body,
            "headers": headers,
        }

    @staticmethod
    def env(name: str, default: Any = None) -> str:
        """django-environ's `env(...)` in a settings module; the URLs it reads are the only values the pages need."""
        return f"https://example.com/{name.lower()}"

    @staticmethod
    def sign_up(email: str) -> None:
        schedule(
            channels=["webhook"],
            webhook_url="https://hooks.example.com/signup",
            payload={"event": "signup", "email": email},
        )

    @staticmethod
    def received_webhook() -> tuple[bytes, dict[str, str]]:
        body = json.dumps({"id": "msg_1", "notification_id": 1, "payload": {"report": "daily"}}).encode()
        now = timezone.now()
        signature = Webhook(SECRET).sign("msg_1", now, body.decode())
        timestamp = str(int(now.timestamp()))
        headers = {"webhook-id": "msg_1", "webhook-timestamp": timestamp, "webhook-signature": signature}
        return body, headers

    def myapp(self) -> dict[str, types.ModuleType]:
        """`myapp.channels`: the page's own channel classes, else a stand-in that succeeds."""
        package = types.ModuleType("myapp")
        channels = types.ModuleType("myapp.channels")

        def lookup(name: str) -> Any:
            found = self.page_namespace.get(name)
            if isinstance(found, type) and issubclass(found, Channel):
                return found
            if name.endswith("Channel"):
                return type(name, (StandInChannel,), {"__module__": "myapp.channels"})
            raise AttributeError(name)

        channels.__getattr__ = lookup  # type: ignore[method-assign]
        package.channels = channels  # type: ignore[attr-defined]
        return {"myapp": package, "myapp.channels": channels}

    def templates(self) -> Path:
        """The templates rows name (`template="news/weekly"`), as a site would have them."""
        folder = self.root / "templates"
        for name in ("news/weekly", "reminders/morning", "reminders/invoice", "comments/digest"):
            (folder / name).mkdir(parents=True)
            (folder / name / "subject.txt").write_text("{{ name }}{{ count }}")
            body = "Hello {{ name }}\n{% for item in items %}{{ item.text }}{% endfor %}"
            (folder / name / "body.txt").write_text(body)
        return folder


# Running a page ------------------------------------------------------------------------


class Reader:
    """One page's blocks, pasted in order into one project."""

    def __init__(self, host: HostCode, stack: ExitStack):
        self.host = host
        self.stack = stack
        self.namespace: dict[str, Any] = {"__name__": "docs_example", **host.names()}
        host.page_namespace = self.namespace
        self.settings_errors: dict[str, str] = {}  # a system check's error -> the block that caused it
        self.printed: dict[str, str] = {}  # a management command -> what it last printed

    def run(self, block: Block) -> None:
        runner = getattr(self, f"run_{block.lang}")
        runner(block)

    def run_python(self, block: Block) -> None:
        before = dict(self.namespace)
        exec(compile(block.body, block.where, "exec"), self.namespace)
        assigned = {
            name: value
            for name, value in self.namespace.items()
            if name.isupper() and (name not in before or before[name] is not value)
        }
        if assigned:
            self.apply_settings(block, assigned)
        if "urlpatterns" in self.namespace and self.namespace["urlpatterns"] is not before.get("urlpatterns"):
            self.use_urlconf(self.namespace["urlpatterns"])

    def apply_settings(self, block: Block, assigned: dict[str, Any]) -> None:
        """Apply a settings block for the rest of the page, and run the system checks.

        A step may need a later one (categories, then the public URL they link to): an error
        is excused while a later block of the page cures it, and none may be left at the end.
        """
        self.stack.enter_context(override_settings(**assigned))
        self.check_settings(block.where)

    def check_settings(self, where: str) -> None:
        errors = {f"{m.id}: {m.msg}" for m in checks.run_checks() if m.level >= checks.ERROR}
        self.settings_errors = {e: w for e, w in self.settings_errors.items() if e in errors}
        self.settings_errors.update({e: where for e in errors if e not in self.settings_errors})

    def finish(self) -> None:
        self.check_settings("the end of the page")
        assert self.settings_errors == {}, "the settings of the page fail the system checks"

    def use_urlconf(self, urlpatterns: list[Any]) -> None:
        module = types.ModuleType("docs_example_urls")
        module.urlpatterns = urlpatterns  # type: ignore[attr-defined]
        self.stack.enter_context(mock.patch.dict(sys.modules, {"docs_example_urls": module}))
        self.stack.enter_context(override_settings(ROOT_URLCONF="docs_example_urls"))
        self.stack.callback(clear_url_caches)
        clear_url_caches()

    def run_sh(self, block: Block) -> None:
        for line in block.body.splitlines():
            argv = shlex.split(line, comments=True)
            if not argv:
                continue
            if argv[:2] == ["python", "manage.py"]:
                out, err = io.StringIO(), io.StringIO()
                call_command(*argv[2:], stdout=out, stderr=err)
                assert "Traceback" not in err.getvalue(), f"{block.where}: {line}\n{err.getvalue()}"
                self.printed[argv[2]] = out.getvalue()
            elif argv[:2] == ["python", "-c"]:
                result = subprocess.run([sys.executable, "-c", argv[2]], capture_output=True, text=True, timeout=60)
                assert result.returncode == 0 and result.stdout.strip(), f"{block.where}: {result.stderr}"
            elif re.fullmatch(r"[A-Z_]+=.*", argv[0]) and len(argv) == 1:
                demo_settings_read(block, line)
            else:
                raise AssertionError(f"{block.where}: no way to run {line!r}: mark the block <!-- not run: why -->")

    def run_django(self, block: Block) -> None:
        engines["django"].from_string(block.body).render({"preferences_url": "/p/", "unsubscribe_url": "/u/"})

    def run_json(self, block: Block) -> None:
        json.loads(block.body)


def demo_settings_read(block: Block, line: str) -> None:
    """A line of the demo project's `.env`: its settings read it, and its system checks pass
    (the line's `$NEW_KEY` and `$OLD_KEY` are the reader's shell variables: two good keys)."""
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "notifications_project.settings",
        "NEW_KEY": SECRET,
        "OLD_KEY": OTHER_SECRET,
    }
    command = f"export {line}; exec {shlex.quote(sys.executable)} manage.py check --fail-level ERROR"
    result = subprocess.run(["/bin/sh", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{block.where}: {line}\n{result.stderr}"


def runnable(page: str) -> list[Block]:
    return [
        b
        for b in page_blocks(page)
        if b.not_run is None and run_elsewhere(b) is None and django.VERSION[:2] >= b.needs_django
    ]


PAGES_THAT_RUN = [page for page in PAGES if runnable(page)]


@pytest.fixture
def host(tmp_path, monkeypatch) -> Iterator[HostCode]:
    host = HostCode(tmp_path)
    # The environment the pages' settings read their secrets from.
    monkeypatch.setenv("NOTIFICATIONS_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("WEBHOOK_SECRET_NEW", SECRET)
    monkeypatch.setenv("WEBHOOK_SECRET_OLD", OTHER_SECRET)
    for name in ("SMTP_PASSWORD", "RESEND_API_KEY", "RESEND_SIGNING_SECRET", "SMS_API_KEY"):
        monkeypatch.setenv(name, f"{name.lower()}-value")
    for name, module in host.myapp().items():
        monkeypatch.setitem(sys.modules, name, module)
    templates = copy.deepcopy(settings.TEMPLATES)
    templates[0]["DIRS"] = [host.templates()]
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=SECRET, TEMPLATES=templates):
        yield host


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", PAGES_THAT_RUN)
def test_the_page_runs(page, host):
    with ExitStack() as stack:
        reader = Reader(host, stack)
        for block in runnable(page):
            reader.run(block)
            for (where, text), check in AFTER_BLOCK.items():
                if where == page and text in block.body:
                    check(reader)
        reader.finish()
        AFTER.get(page, lambda reader: None)(reader)


# What some pages' examples must then do ------------------------------------------------


def _readme(reader: Reader) -> None:
    # "Try it on your machine": the shell step queued one email and the tick sent it.
    assert re.search(r" claimed=1 succeeded=1 ", reader.printed["runtick"]), reader.printed["runtick"]
    assert not Notification.objects.filter(key="invoice-7-reminder").exists()  # cancelled last


def _recipients(reader: Reader) -> None:
    # The URLconf of step 3 serves the recipients' pages where the links point.
    url = reverse("notifications:unsubscribe", args=["token"])
    assert url == "/notifications/unsubscribe/token/"
    assert resolve(url).func is views.unsubscribe


def _preferences(reader: Reader) -> None:
    # "From code": preferences() returns what the comment says (before the page's erasure).
    expected = {"billing": {"email": True, "webhook": True}, "news": {"email": False, "webhook": True}}
    assert reader.namespace["preferences"]("user:42") == expected


def _security(reader: Reader) -> None:
    view = reader.namespace["notification_hook"]
    body, headers = HostCode.received_webhook()
    meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    request = RequestFactory().post("/hooks/", body, content_type="application/json", **meta)
    assert view(request).status_code == 204  # verify_request() read NOTIFICATIONS_WEBHOOK_SECRET
    forged = RequestFactory().post("/hooks/", body + b" ", content_type="application/json", **meta)
    assert view(forged).status_code == 400
    assert reader.namespace["event"]["payload"] == {"report": "daily"}  # verify() with the keys given
    assert len(reader.host.handled) == 1


def _host_code(reader: Reader) -> None:
    for name, test in list(reader.namespace.items()):
        if name.startswith("test_") and callable(test):
            test(db=None)


def _operations(reader: Reader) -> None:
    # The metrics view is where the URLconf says, closed to anonymous requests.
    assert Client().get("/metrics/notifications/").status_code == 403


# (page, a string of the block) -> what must hold right after that block.
AFTER_BLOCK = {
    ("docs/recipients.md", 'preferences("user:42")'): _preferences,
}
AFTER = {
    "README.md": _readme,
    "docs/recipients.md": _recipients,
    "docs/security.md": _security,
    "docs/host-code.md": _host_code,
    "docs/operations.md": _operations,
}
