"""The README is the first hour, and the reference it points to is complete.

README.md keeps what a newcomer reads first (what it is, try it, embed it, schedule, the
admin, run the tick); the reference lives in docs/: every setting of `notifications.conf`
in docs/settings.md, every check id of `notifications.checks` in docs/checks.md. Every
relative link of the README and of docs/ reaches a file that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from notifications import checks
from notifications.conf import Defaults

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_the_first_hour_and_links_the_reference():
    for section in (
        "## Quick start",
        "## Embedding in an existing site",
        "## Scheduling from your code",
        "## The admin: the operator's console",
        "## Running the tick",
    ):
        assert section in README, section
    for reference in ("docs/settings.md", "docs/checks.md", "docs/outcomes.md", "docs/performance.md"):
        assert f"]({reference}" in README, reference
    assert "| `NOTIFICATIONS_TICK_LIMIT` |" not in README  # the tables are docs/'s
    assert len(README.splitlines()) <= 350  # the first hour; the rest is docs/'s
    # The two newcomer commands.
    assert "make run" in README and "\nmake test\n" in README


def test_the_embedding_section_says_how_to_turn_on_djangos_tasks():
    embedding = README.split("## Embedding in an existing site", 1)[1].split("\n## ", 1)[0]
    assert '`TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend"}}`' in embedding
    assert "run by `runtick`" in embedding and "](docs/tasks.md)" in embedding


def test_nothing_is_installed_by_a_name_no_index_has():
    assert "not on a package index yet" in README
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        installs = re.findall(r"pip install \S+", page.read_text())
        by_name = [i for i in installs if "django-notification-queue" in i]
        assert by_name == [], page.name  # the checkout's path, as the README's step 1 says
    assert 'pip install "/path/to/checkout[apprise]"' in (REPO / "docs" / "channels.md").read_text()


def test_the_readme_says_the_recipients_pages_need_their_urls():
    assert "no URLs to include" not in README
    embedding = README[README.index("## Embedding in an existing site") : README.index("## Scheduling from your code")]
    assert 'path("notifications/", include("notifications.urls"))' in embedding


def test_every_setting_is_in_the_settings_table():
    table = (REPO / "docs" / "settings.md").read_text()
    names = [name for name in vars(Defaults) if name.isupper()]
    assert "METRICS_TOKEN" in names
    missing = [name for name in names if f"| `NOTIFICATIONS_{name}` |" not in table]
    assert missing == []
    assert "Authorization: Bearer" in table


def test_every_check_id_is_in_the_checks_table():
    table = (REPO / "docs" / "checks.md").read_text()
    ids = sorted(set(re.findall(r'id="notifications\.([EW]\d{3})"', _checks_source())))
    assert "W010" in ids
    missing = [i for i in ids if f"`{i}`" not in table and not _in_a_range(i, table)]
    assert missing == []


def _checks_source() -> str:
    """The app's checks (a package by topic) and each built-in channel's own."""
    package = Path(checks.__file__).parent
    files = [*package.glob("*.py"), *package.parent.glob("channels/*/checks.py")]
    return "".join(path.read_text() for path in files)


def _in_a_range(check_id: str, table: str) -> bool:
    """`E001` to `E005` (an en dash between them) covers E003."""
    for low, high in re.findall(r"`([EW]\d{3})`\u2013`([EW]\d{3})`", table):
        if low[0] == check_id[0] and int(low[1:]) <= int(check_id[1:]) <= int(high[1:]):
            return True
    return False


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))])
def test_relative_links_reach_files(page):
    path = REPO / page
    broken = [t for t in LINK.findall(path.read_text()) if not (path.parent / t).exists()]
    assert broken == []


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_a_section_reach_a_heading():
    """Material moved between pages leaves no link to a section that is gone."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    headings = {
        page: {_slug(h) for h in re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", page.read_text(), flags=re.S), re.M)}
        for page in pages
    }
    broken = [
        f"{page.name}: {target}#{anchor}"
        for page in pages
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text())
        if (dest := (page.parent / target).resolve() if target else page) in headings and anchor not in headings[dest]
    ]
    assert broken == []
