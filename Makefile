# The two commands of the README:
#   make run    set up .venv, migrate the SQLite database, serve the admin, start the demo
#               (a login, sample notifications, a local webhook sink) and tick every 10 s;
#               PORT=8001 make run (or make run PORT=8001) serves on another port; the first
#               run copies .env.example to .env (DEBUG on, for this checkout)
#   make test   set up .venv, run the whole suite on SQLite, then on the local PostgreSQL,
#               then lint, mypy and Django's checks, then Python 3.13 + Django 6.x through tox
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000

.PHONY: setup run test test-sqlite test-postgres test-matrix lint check bench

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

run: setup .env
	$(PY) manage.py migrate --no-input --skip-checks
	$(PY) manage.py runserver $(PORT) --noreload --insecure --skip-checks & server=$$!; \
	trap 'kill $$server 2>/dev/null' EXIT INT TERM; \
	$(PY) manage.py demo --admin-url http://127.0.0.1:$(PORT)/admin/

# A development checkout's environment: the template, once; edits to .env are kept.
.env:
	cp -n .env.example .env

test: setup test-sqlite test-postgres check test-matrix

test-sqlite: setup
	$(PY) -m pytest

test-postgres: setup
	$(PY) -m pytest --ds=tests.settings_postgres

# The version matrix (tox.ini): .venv above is Python 3.11 + Django 5.2 on SQLite and
# PostgreSQL; here the newest Python 3.13/3.12 found + the newest Django 6.x, on SQLite.
test-matrix: setup
	$(PY) -m tox run -e django6 --discover "$$(.ci/find-python 3.13 3.12)"

check: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports  # the layers of pyproject.toml: pure rules, workers without a database
	$(PY) manage.py check --fail-level WARNING
	$(PY) manage.py makemigrations --check --dry-run

# The benchmark of docs/performance.md (SQLite; DATABASE_URL=postgres://... for PostgreSQL).
bench: setup
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) bench/run.py
