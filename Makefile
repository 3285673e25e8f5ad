# Two entry points for a fresh clone: `make demo` and `make test`. Everything else is their plumbing.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-install
CASES := cases/build/manifest.json
DEMO_OUT := $(or $(TMPDIR),/tmp)/lar-prec-demo

.PHONY: all venv cases real-lar demo test bench clean

all: demo

# Reinstall only when the dependency description changes.
$(STAMP): pyproject.toml setup.py lar_prec/compare/engine/_kernel.c constraints.txt scripts/find-python310.sh
	@set -e; \
	if [ ! -x $(PY) ] || ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then \
	  py=$$(scripts/find-python310.sh); \
	  echo "creating $(VENV) with $$py"; rm -rf $(VENV); "$$py" -m venv $(VENV); \
	fi; \
	echo "installing lar-prec and pinned dependencies (first time: megengine is a ~940 MB download)"; \
	$(PY) -m pip install --disable-pip-version-check -q -c constraints.txt --config-settings editable_mode=compat \
	  -e '.[megengine,store,zoo,test]'; \
	if ! $(PY) -c 'import lar_prec.compare.engine._kernel' 2>/dev/null; then \
	  echo "warning: the C kernel (lar_prec/compare/engine/_kernel.c) was not built: no C compiler? compare falls back to numpy, ~2x slower"; \
	fi; \
	touch $(STAMP)
	@# editable_mode=compat: the checkout goes on sys.path through a .pth file; setuptools' default
	@# editable finder cost every lar-prec process ~10 ms at start-up (an analysis starts four).
	@# Editable installs are not byte-compiled, and some environments set PYTHONDONTWRITEBYTECODE:
	@# compile once so every lar-prec process (and each bundled load_and_run) starts faster.
	@$(PY) -m compileall -q lar_prec cases >/dev/null || true

venv: $(STAMP)

$(CASES): $(STAMP) $(wildcard cases/*.py)
	$(PY) -m cases.build --out cases/build

cases: $(CASES)

# MegEngine 1.13's own C++ load_and_run for the tests marked real_lar, built from ../shared/real-lar
# into a cache folder outside the tree ($$XDG_CACHE_HOME or ~/.cache, lar-prec/real-lar/<hash>), again
# only when the build script, its tarballs or the venv change. Without ../shared/real-lar those tests
# skip with that reason; under CI=true a missing or failed build fails here (scripts/real-lar.sh).
real-lar: $(STAMP)
	@bash scripts/real-lar.sh build

demo: $(CASES)
	$(PY) -m cases.demo --out $(DEMO_OUT)

test: $(CASES) real-lar
	@bash scripts/ensure-chromium.sh
	@bash scripts/ensure-sshd.sh
	@bash scripts/ensure-postgres.sh
	@# independent tests run on every core (pytest-xdist); each test makes its own temp folders,
	@# ports and servers, so none shares a resource with another (see tests/conftest.py). One
	@# worker more than cores: tests wait on child processes, timeouts and servers a good part
	@# of the time (2 cores: 852 s with 3 workers, 897 s with 2, the same hour)
	$(PY) -m pytest -q -n $$(( $$(nproc) + 1 )) --dist worksteal

bench: $(CASES)
	$(PY) bench/run.py

clean:
	rm -rf cases/build .pytest_cache
