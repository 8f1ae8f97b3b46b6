# The two commands of the README:
#   make run    set up .venv, migrate the SQLite database, serve the admin and tick every minute
#   make test   set up .venv, run the whole suite on SQLite, then on the local PostgreSQL
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000

.PHONY: setup run test test-sqlite test-postgres lint check

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

run: setup
	$(PY) manage.py migrate --no-input
	$(PY) manage.py runserver $(PORT) --noreload & server=$$!; \
	trap 'kill $$server 2>/dev/null' EXIT INT TERM; \
	echo "Admin: http://127.0.0.1:$(PORT)/admin/  (create a login: $(PY) manage.py createsuperuser)"; \
	$(PY) manage.py runtick --loop 60 -v 2

test: setup test-sqlite test-postgres check

test-sqlite: setup
	$(PY) -m pytest

test-postgres: setup
	$(PY) -m pytest --ds=tests.settings_postgres

check: setup
	$(PY) -m ruff check .
	$(PY) manage.py check --fail-level WARNING
	$(PY) manage.py makemigrations --check --dry-run
