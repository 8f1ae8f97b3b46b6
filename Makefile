# The two commands of the README:
#   make run    set up .venv with requirements.txt alone (the product and the demo), migrate
#               the SQLite database, serve the admin, start the demo (a login, sample
#               notifications, a local webhook sink) and tick every 10 s;
#               PORT=8001 make run (or make run PORT=8001) serves on another port; the first
#               run copies .env.example to .env (DEBUG on, for this checkout)
#   make test   add requirements-dev.txt to .venv, run the whole suite on SQLite, on the local
#               PostgreSQL, on the local MariaDB and (tox) on Python 3.13 + Django 6.x side by
#               side, printing each one's progress, then lint, mypy, the import layers and
#               Django's checks (even when a suite failed), and a table of the results
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
# pytest-xdist workers per pass: most of the suite waits (on sockets, child processes,
# deadlines), so more workers than this machine's 2 cores pay off; each has its own database.
TEST_WORKERS ?= 4
PARALLEL_TEST_WORKERS ?= 2  # per suite when make test runs the four side by side
# ... but the PostgreSQL pass, the longest: its tests wait the most (leases run out in real
# time, the PgBouncer copies, the benchmark's processes), so a third worker shortens it while
# its CPU is not the machine's limit; the other three are done minutes earlier.
PARALLEL_POSTGRES_TEST_WORKERS ?= 3

# The suite starts child processes by the hundred (runtick, manage.py, the benchmark's
# workers): without cached bytecode each compiles the app again, a CPU-bound suite's waste.
# An environment that turns the cache off does not reach them (__pycache__ is git-ignored).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup setup-run run test test-sqlite test-postgres test-mariadb test-matrix lint check bench

# `make run` installs what the product and the demo need (requirements.txt); `make test`
# and the other targets add the development toolchain (requirements-dev.txt).
setup: $(VENV)/.installed

setup-run: $(VENV)/.installed-run

$(VENV)/.installed-run: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.installed: $(VENV)/.installed-run requirements-dev.txt bench/requirements.txt
	.ci/mysql-build-deps  # mysqlclient (the MariaDB pass) builds from source: headers, pkg-config, a compiler
	.ci/pgbouncer-dep  # the PostgreSQL pass's PgBouncer tests start Debian's pgbouncer (skipped without it)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

run: setup-run .env
	$(PY) manage.py migrate --no-input --skip-checks
	$(PY) manage.py runserver $(PORT) --noreload --insecure --skip-checks & server=$$!; \
	trap 'kill $$server 2>/dev/null' EXIT INT TERM; \
	$(PY) manage.py demo --admin-url http://127.0.0.1:$(PORT)/admin/

# A development checkout's environment: the template, once; edits to .env are kept.
.env:
	cp -n .env.example .env

# The four suites (SQLite, PostgreSQL, MariaDB, the Django 6 matrix leg) run side by side:
# each spends most of its time waiting on its database, sockets and child processes, so
# on two cores together they take about as long as the longest alone. Each writes its
# whole output to $(RESULTS)/<suite>.log and its results to <suite>.xml; the terminal
# gets short lines as they go ([sqlite] started / FAILED ... / 812/2013 done / finished).
# Then the checks, even when a suite failed, and one table (.ci/test-table); the exit
# status is non-zero when anything failed.
RESULTS ?= $(CURDIR)/.test-results
SUITES := sqlite postgres mariadb matrix

test: setup
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@echo "make test: $(SUITES) side by side, each one's log in $(RESULTS)/"
	@status=0; started=$$(date +%s); \
	$(MAKE) --no-print-directory -k -j4 TEST_WORKERS=$(PARALLEL_TEST_WORKERS) \
		POSTGRES_TEST_WORKERS=$(PARALLEL_POSTGRES_TEST_WORKERS) SUITE_LOGS=1 \
		$(addprefix test-,$(SUITES)) || status=1; \
	echo "make test: the suites took $$(( $$(date +%s) - started ))s; now make check"; \
	$(MAKE) --no-print-directory check && checked=passed || { checked=FAILED; status=1; }; \
	$(PY) .ci/test-table $(RESULTS) $(SUITES) || status=1; \
	echo "check: $$checked"; \
	echo "make test: $$( [ $$status = 0 ] && echo passed || echo FAILED ) in $$(( $$(date +%s) - started ))s"; \
	exit $$status

# One suite's pytest options: alone (`make test-sqlite`) its output is the terminal's; under
# `make test` (SUITE_LOGS=1) it goes to its log, progress lines and results beside it.
suite_options = $(if $(SUITE_LOGS),--progress $(1) --junitxml=$(RESULTS)/$(1).xml)
suite_output = $(if $(SUITE_LOGS),> $(RESULTS)/$(1).log)
results_dir = $(if $(SUITE_LOGS),@mkdir -p $(RESULTS))

test-sqlite: setup
	$(results_dir)
	$(PY) -m pytest -n $(TEST_WORKERS) $(call suite_options,sqlite) $(call suite_output,sqlite)

test-postgres: setup
	$(results_dir)
	$(PY) -m pytest -n $(or $(POSTGRES_TEST_WORKERS),$(TEST_WORKERS)) --ds=tests.settings_postgres \
		$(call suite_options,postgres) \
		$(call suite_output,postgres)

# The local MariaDB (127.0.0.1:3306, root, no password); MySQL 8 takes the same settings.
test-mariadb: setup
	$(results_dir)
	$(PY) -m pytest -n $(TEST_WORKERS) --ds=tests.settings_mysql $(call suite_options,mariadb) \
		$(call suite_output,mariadb)

# The version matrix (tox.ini): .venv above is Python 3.11 + Django 5.2 on SQLite and
# PostgreSQL; here the newest Python 3.13/3.12 found + the newest Django 6.x, on SQLite.
test-matrix: setup
	$(results_dir)
	$(PY) -m tox run -e django6 --discover "$$(.ci/find-python 3.13 3.12)" -- -n $(TEST_WORKERS) \
		$(call suite_options,matrix) $(call suite_output,matrix)

check: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports  # the layers of pyproject.toml: pure rules, workers without a database, no cycle
	$(VENV)/bin/lint-imports --config .ci/bench-imports.toml  # no cycle in bench/ either
	$(PY) manage.py check --fail-level WARNING
	$(PY) manage.py makemigrations --check --dry-run

# The benchmark of docs/performance.md (SQLite; DATABASE_URL=postgres://... for PostgreSQL).
bench: setup
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) bench/run.py
