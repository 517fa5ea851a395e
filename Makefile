# Two commands set everything up on a fresh machine:
#   make demo   runs the demo on an embedded PostgreSQL (no server needed)
#   make test   runs the whole test suite against both dialects
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: bench scale freeze demo test venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pyqueue-sql demo

test: $(STAMP)
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

clean:
	rm -rf $(VENV) .pytest_cache

# Copies the current routines into the newest migration revision (run after
# editing sql/<dialect>/routines.sql; a test fails until you do).
freeze:
	@latest=$$(ls migrations/versions/0*.py | sort | tail -1 | xargs basename | sed 's/\.py$$//'); \
	for d in postgresql mysql; do cp sql/$$d/routines.sql migrations/sql/$$d/$$latest.routines.sql; done; \
	echo "froze sql/*/routines.sql into $$latest"
