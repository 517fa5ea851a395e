# Two commands set everything up on a fresh machine:
#   make demo   runs the demo on an embedded PostgreSQL (no server needed)
#   make test   runs the whole test suite against both dialects
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark

.PHONY: bench scale soak freeze demo test venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The Spark extra (pyspark) for the Spark tests and the demo's Spark stage;
# scripts/spark-deps.sh adds Java and the JDBC jars with apt-get where it can.
$(SPARK_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(SPARK_STAMP)

venv: $(STAMP)

# The Spark stage runs when Java is there (or can be installed); it says so when skipped.
demo: $(STAMP)
	$(VENV)/bin/pyqueue-sql demo
	@if command -v java >/dev/null 2>&1; then \
	  bash scripts/spark-deps.sh || true; \
	  if $(MAKE) --no-print-directory $(SPARK_STAMP); then $(PY) examples/spark_pipeline.py --demo; \
	  else echo "demo: Spark stage SKIPPED: could not install the spark extra (pip install -e '.[spark]')"; fi; \
	else \
	  echo "demo: Spark stage SKIPPED: no Java runtime (apt-get install default-jre-headless, then make demo)"; \
	fi

test: $(STAMP) $(SPARK_STAMP)
	@bash scripts/spark-deps.sh
	$(PY) -m pytest $(PYTEST_ARGS)

# Side-by-side benchmark against PGQueuer, procrastinate, the naive design and
# the INSERT ceiling (bench/README.md). Full run ~10-15 min; quick:
#   make bench BENCH_ARGS=--quick
# Scale measurements (1M messages, churn, xmin horizon): make scale
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) bench/bench.py $(BENCH_ARGS)

scale: $(STAMP)
	$(PY) bench/scale.py $(SCALE_ARGS)

# Soak: 10 min of mixed load per dialect while workers are killed and restarted
# at random; exits non-zero when the accounting does not balance (bench/README.md).
#   make soak SOAK_ARGS="--minutes 1 --dialect postgresql"
soak: $(STAMP)
	$(PY) bench/soak.py $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache

# Copies the current routines into the newest migration revision (run after
# editing sql/<dialect>/routines.sql; a test fails until you do).
freeze:
	@latest=$$(ls migrations/versions/0*.py | sort | tail -1 | xargs basename | sed 's/\.py$$//'); \
	for d in postgresql mysql; do cp sql/$$d/routines.sql migrations/sql/$$d/$$latest.routines.sql; done; \
	echo "froze sql/*/routines.sql into $$latest"
