# Berth: `make run` starts the console with a demo cluster; `make test` runs every check CI runs.
# The first of python3.12, python3.11, python3 that runs and is 3.11 or 3.12.
PYTHON ?= $(shell for p in python3.12 python3.11 python3; do \
	$$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null && { echo $$p; break; }; \
	done)
VENV := .venv
PY := $(VENV)/bin/python
# Starts embedded PostgreSQL and Redis under var/ unless DATABASE_URL / REDIS_URL are set.
WITH_SERVICES := $(PY) -m console.services exec --
# The tests seed the demo (and start processes that would refuse its passwords otherwise).
TEST_ENV := BERTH_DEMO=1 BERTH_CHANNEL_PREFIX=berth-test BERTH_CELERY_QUEUE=berth-test
PORT ?= 8000

.PHONY: venv run test lint check pytest bench vendor stop chromium engines

venv: $(VENV)/.installed

# --no-compile: Python compiles what a process imports on first use; pip compiling every file
# of every installed package (Ray's and the Kubernetes client's thousands) took 20 s more.
$(VENV)/.installed: pyproject.toml sdk/pyproject.toml
	@test -n "$(PYTHON)" || { echo "Berth needs Python 3.11 or 3.12: install one, or set PYTHON=/path/to/python3.12"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet --no-compile -e '.[dev]'
	$(VENV)/bin/pip install --quiet --no-compile -e './sdk[openai]'
	touch $@

run: venv
	$(WITH_SERVICES) $(PY) manage.py migrate --noinput
	@test -f var/demo-seeded || (BERTH_DEMO=1 $(WITH_SERVICES) $(PY) manage.py seed_demo && \
		$(WITH_SERVICES) $(PY) manage.py make_tiny_model && touch var/demo-seeded)
	@echo
	@echo "Berth is starting at http://127.0.0.1:$(PORT)/"
	@echo "Demo logins: admin / berth-admin, operator / berth-operator, viewer / berth-viewer"
	@echo "Ctrl-C stops the console and leaves the models serving; make stop stops everything, models too"
	@echo
	BERTH_DEMO=1 BERTH_PORT=$(PORT) $(PY) -m console.services run -- $(VENV)/bin/honcho start -f Procfile

# The console, the engines of its standalone and simulator clusters, PostgreSQL and Redis.
stop:
	-$(PY) -m console.services stop

# Templates: djlint's layout (settings in pyproject.toml), its django lint rules, and no line over 200.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/djlint templates --check
	$(VENV)/bin/djlint templates --lint
	@awk 'length > 200 { print FILENAME ":" FNR ": " length " characters, at most 200"; long = 1 } END { exit long }' \
		$$(find templates -name '*.html')

check: venv
	$(WITH_SERVICES) $(PY) manage.py check
	$(WITH_SERVICES) $(PY) manage.py makemigrations --check --dry-run

# vLLM's CPU build and llama.cpp's server, once per version, into ~/.cache/berth/engines
# (BERTH_ENGINE_CACHE): the real engines of the `local` cluster and of the real-engine tests.
engines:
	bash scripts/engines.sh

chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium)

# Two workers: most tests wait on processes they started, so two overlap well on two cores.
TEST_WORKERS ?= 2

pytest: venv chromium engines
	$(TEST_ENV) $(WITH_SERVICES) $(VENV)/bin/pytest -n $(TEST_WORKERS)

test: lint check pytest

bench: venv
	$(PY) tests/bench/bench_placement.py
	$(PY) tests/bench/bench_gateway.py
	$(PY) tests/bench/bench_routing.py
	BERTH_BENCH_FULL=1 $(TEST_ENV) $(WITH_SERVICES) $(VENV)/bin/pytest tests/bench -m bench -s

vendor:
	$(PY) scripts/vendor.py
