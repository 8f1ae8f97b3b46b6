"""The package's import graph: no cycle, any import order works, pure modules stay light.

Each module is imported first in a fresh interpreter, and after a few of them, drawn at
random, all the others in a random order; the graph of import-time imports is checked
statically for cycles; and the receiving helper, which host sites import into their
views, must not drag the tick's dependencies (croniter, dateutil, django.core.mail,
urllib3, requests) along.
"""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import random
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

import notifications

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(notifications.__file__).parent

MODULES = sorted(
    [notifications.__name__]
    + [
        info.name
        for info in pkgutil.walk_packages(notifications.__path__, prefix="notifications.")
        if ".migrations" not in info.name
    ]
)

# Import `first` (setting Django up only when it needs the app registry), once per module
# of the package; after the `full` firsts the seed draws, Django is set up and every other
# module follows in a shuffled order. All the others after every first cost minutes (the
# package has ~250 modules: n^2 imports) and found nothing the static graph below does
# not: a cycle, the only way an order can matter, fails test_the_package_has_no_import_cycle.
# One interpreter loads Django and the third-party libraries, then forks a child per
# order, so each child starts with no module of the app imported (as a fresh process
# would) without paying for an interpreter's start each time. A module that defines or
# loads models needs the app registry: it is imported again after django.setup(), which
# (as in every Django process) has already imported notifications.models and, from
# AppConfig.ready(), notifications.checks.
IMPORT_ALL_ORDERS = """
import importlib, json, os, random, sys, traceback
import django, django.contrib.admin, django.core.mail, requests, croniter, dateutil.rrule
from django.core.exceptions import AppRegistryNotReady

seed, full, *modules = sys.argv[1:]
full_orders = set(random.Random(int(seed)).sample(modules, min(int(full), len(modules))))

# What django.setup() imports besides the app (Django's and the libraries' modules), found
# by one throwaway child: loaded here once, not again in each child that sets Django up.
# Model modules need the app registry and fail here: each child imports those itself.
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    before = set(sys.modules)
    try:
        django.setup()
    finally:
        os.write(write, " ".join(m for m in sys.modules if m not in before).encode())
        os._exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    setup_imports = pipe.read().split()
os.waitpid(pid, 0)
for name in setup_imports:
    if name.partition(".")[0] not in ("notifications", "notifications_project", "tests"):
        try:
            importlib.import_module(name)
        except Exception:
            pass
assert not [m for m in sys.modules if m.startswith("notifications")], "the parent imported the app"
failures = {}
for first in modules:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            try:
                importlib.import_module(first)
            except AppRegistryNotReady:
                django.setup()
                importlib.import_module(first)
            if first in full_orders:
                django.setup()
                others = [m for m in modules if m != first]
                random.Random(int(seed)).shuffle(others)
                for name in others:
                    importlib.import_module(name)
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            os._exit(1)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        error = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if status:
        failures[first] = error or f"exit status {status}"
print(json.dumps(failures))
"""


FULL_ORDERS = 4  # firsts followed by every other module (a fresh draw each run)


def python(
    code: str, *args: str, settings: str | None = "tests.settings", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    if settings is not None:
        env["DJANGO_SETTINGS_MODULE"] = settings
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_walk_finds_the_package():
    assert {"notifications.models", "notifications.channels.webhook", "notifications.receiving"} <= set(MODULES)


@pytest.mark.slow
@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
    reason="no database of its own (its children read the SQLite test settings); runs in the SQLite passes",
)
def test_each_module_imports_first_then_all_others_in_any_order():
    """Every module of the package imported first; after a few of them, all the others shuffled.

    One test, not one per module: the orders run in one child interpreter, which a test
    per module would repeat on every pytest-xdist worker that ran one.
    """
    seed = random.randrange(2**32)
    done = python(IMPORT_ALL_ORDERS, str(seed), str(FULL_ORDERS), *MODULES, timeout=900)
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout)
    assert not failures, "\n\n".join(
        f"importing {first} first (seed {seed}: the others follow it when drawn):\n{error}"
        for first, error in failures.items()
    )


def test_an_import_order_that_fails_is_reported():
    """The forked children really import: a module that fails to import fails every order."""
    done = python(IMPORT_ALL_ORDERS, "1", "2", "notifications", "notifications.no_such_module")
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout)
    assert set(failures) == {"notifications", "notifications.no_such_module"}
    assert all("ModuleNotFoundError: No module named 'notifications.no_such_module'" in f for f in failures.values())


# --- the static graph -----------------------------------------------------------------------------


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported.

    Those inside functions (deferred on purpose) and under `if TYPE_CHECKING:` do not.
    """
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _import_time_imports(node.body)
            found += _import_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            found += _import_time_imports(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                found += _import_time_imports(handler.body)
        elif isinstance(node, ast.With | ast.ClassDef):  # a class body runs at import time too
            found += _import_time_imports(node.body)
    return found


def _source(module: str) -> tuple[Path, bool]:
    """(file, is a package) of a module of the package."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    if path.is_dir():
        return path / "__init__.py", True
    return path.with_suffix(".py"), False


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports at import time.

    Importing `a.b.c` runs `a` and `a.b` first, so those count too; a module's own
    parent packages do not (they always run before it).
    """
    known = set(MODULES)
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        path, is_package = _source(module)
        here = module if is_package else module.rpartition(".")[0]
        names: list[str] = []
        for node in _import_time_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
                continue
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names.append(target)
            names += [f"{target}.{alias.name}" for alias in node.names]  # `from . import signing`
        ancestors = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
        deps: set[str] = set()
        for name in names:
            parts = name.split(".")
            deps |= {".".join(parts[:n]) for n in range(1, len(parts) + 1)} & known
        graph[module] = deps - ancestors - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert graph["notifications.tick.engine"], "the graph reads imports (sanity)"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_validation_depends_on_no_channel_and_no_model():
    needs = reachable(import_graph(), "notifications.models.validation")
    models = {"notifications.models.notification", "notifications.models.log", "notifications.models.flow"}
    assert not {m for m in needs if m.startswith("notifications.channels") or m in models}, needs


def test_signing_and_secrets_are_pure():
    graph = import_graph()
    assert reachable(graph, "notifications.rules.secrets") <= {"notifications"}
    assert reachable(graph, "notifications.rules.signing") <= {"notifications", "notifications.rules.secrets"}


# --- what a receiving site loads ------------------------------------------------------------------

HEAVY = [
    "croniter",
    "dateutil.rrule",
    "django.core.mail",
    "urllib3",
    "requests",
    "notifications.rules.schedule",
    "notifications.channels.http.guard",
    "notifications.channels.email",
]

RECEIVE = """
import json, sys
from notifications.receiving import verify
from tests.support import vectors

headers = {
    "webhook-id": vectors.MSG_ID,
    "webhook-timestamp": str(vectors.TIMESTAMP),
    "webhook-signature": vectors.SIGNATURE,
}
event = verify(vectors.BODY, headers, vectors.SECRET, now=vectors.TIMESTAMP)
print(json.dumps({"modules": sorted(sys.modules), "event": event}))
"""


def test_receiving_loads_only_what_it_needs():
    done = python(RECEIVE, settings=None)  # no settings and no django.setup(): a plain import
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    loaded = set(result["modules"])
    assert [m for m in HEAVY if m in loaded] == []
    assert {m for m in loaded if m.startswith("notifications")} == {
        "notifications",
        "notifications.exceptions",  # InvalidWebhook's base: a class, no import
        "notifications.receiving",
        "notifications.rules",
        "notifications.rules.secrets",
        "notifications.rules.signing",
    }
    assert result["event"] == {"test": 2432232314}


# Issue 41: a reader finds what is where from the package's top; each concern past these
# few public modules has a package of its own (channels, recipients, checks, ...).
MOST_TOP_LEVEL_MODULES = 15


def test_few_modules_sit_directly_in_the_package():
    top_level = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top_level) <= MOST_TOP_LEVEL_MODULES, top_level
