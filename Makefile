# The two set-up commands of README.md: `make demo` and `make test`. `make test` is the
# fast tier on two workers (pytest-xdist; each worker its own schemas, and its own
# embedded PostgreSQL when PGBATON_TEST_DSN is unset); `make test-all` is every tier.
# The tiers: tests/conftest.py (TIERS) and CONTRIBUTING.md.
# Each creates the virtualenv itself; only Python 3.11+ needs to be present.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-all lint generate clean bench docs model chaos soak

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m pgbaton demo

# Workers: two by default (the cores of the machine this was measured on); JOBS=auto
# uses every core, JOBS=0 none (one process, as before xdist).
JOBS ?= 2
FAST_TIER := not (processes or fleet or failover or pgbouncer or browser or slow or serial)

# --dist loadgroup: the tests of a module with a module-scoped fixture share a worker,
# and (in test-all) those marked serial run one after another on one (tests/conftest.py).
test: $(VENV)/.installed
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "$(FAST_TIER)" $(PYTEST_ARGS)

# Every tier.
test-all: $(VENV)/.installed
	$(PY) -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests tools benchmarks examples
	$(PY) -m mypy
	$(PY) tools/async_to_sync.py --check
	$(PY) tools/check_imports.py
	$(PY) tests/typing/check.py

generate: $(VENV)/.installed
	$(PY) tools/async_to_sync.py

# The spin model of the claim protocol (docs/explanation/model/claim.pml); needs spin
# and a C compiler.
model: $(VENV)/.installed
	$(PY) -m tests.fleet.spin_model

# The long failover runs and, where network namespaces are allowed, the fleet runs (the
# randomised one at 50,000 jobs: PGBATON_CHAOS_JOBS=N to change); prints their tables.
chaos: $(VENV)/.installed
	PGBATON_CHAOS=1 $(PY) -m pytest tests/fleet -k chaos -s $(PYTEST_ARGS)

bench:
	PYTHON=$(PYTHON) bash benchmarks/setup_venv.sh
	.venv-bench/bin/python -m benchmarks.run $(BENCH_ARGS)

# Steady load at half the measured drain for 30 minutes on the embedded PostgreSQL 18, the
# retention modes delete and history side by side (each its own schema, producer and
# worker, on one server); writes benchmarks/results/soak.{csv,png,md} (benchmarks/README.md,
# "The soak"). SOAK_ARGS="--modes history --out benchmarks/results/soak-history" runs the
# default mode alone (issue 16's item 5); SOAK_ARGS="--modes delete" runs one lane.
soak:
	PYTHON=$(PYTHON) bash benchmarks/setup_venv.sh
	.venv-bench/bin/python -m benchmarks.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .venv-bench .pytest_cache .mypy_cache .ruff_cache site

# The documentation site (mkdocs.yml) into site/; --strict: any warning fails.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
