# The two commands a reader needs (see README.md):
#   make book   create .venv if missing, export the package, execute every notebook, build the website in _site/
#   make test   create .venv if missing, lint with ruff, run nbdev-test on every notebook and the pytest suite (incl. the
#               browser test)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
NB ?= nbs
# Number of notebooks executed at once (the CI machine has 2 cores). Each notebook's torch then uses one thread:
# two processes with two threads each on two cores run small models many times slower than one thread each.
WORKERS ?= 2
NB_THREADS ?= 1
# `make book SOLUTIONS=0` (or `make site SOLUTIONS=0`): a site without the exercises' solutions, for a course.
SOLUTIONS ?= 1
SITE_FLAGS := $(if $(filter 0,$(SOLUTIONS)),--no-solutions)

.PHONY: book test lint env export outputs site serve bench experiments browser clean lock test-latest test-oldest

# Every package of the environment, transitive ones included, at the versions the book was last tested with: one
# universal lock for Linux, macOS and Windows, Python >= 3.11.5 (see CONTRIBUTING.md, "The lock"). The real file is
# package data (transformerbook/requirements-lock.txt, read by `transformerbook doctor`); the root one links to it.
LOCK := requirements-lock.txt
# Where the lock's CPU torch comes from: a local wheel folder pip already reads, else PyTorch's CPU index (Linux only)
TORCH_OPTS = $(shell $(PYTHON) tools/torch_index.py $(1))

$(STAMP): pyproject.toml $(LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))' || { echo "make env needs Python 3.11.5 or \
	newer (the site's pinned toolchain does: soupsieve 4.1.2); set PYTHON=/path/to/python3.12, for example"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(call TORCH_OPTS,$(LOCK)) -r $(LOCK)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) tools/fetch_mathjax.py
	@touch $(STAMP)

# Recompile the lock from its inputs after changing one of them; `make lock UPGRADE=1` also moves every package to the
# newest version the inputs allow (then run make test and commit the lock with what changed; see CONTRIBUTING.md).
UV ?= uv
lock:
	$(UV) pip compile pyproject.toml --extra dev --extra docs -c site/constraints.txt -c constraints-torch.txt \
	  --universal --python-version 3.11.5 $(call TORCH_OPTS,constraints-torch.txt) $(if $(UPGRADE),--upgrade) \
	  --annotation-style line --custom-compile-command "make lock" -o transformerbook/$(LOCK)

# The two runs that say what a new (or an old) release changes; not part of `make test` or `.ci/run`. Each builds its
# own venv, runs lint, nbdev-test and pytest, and prints the versions that differ from the lock and the tests whose
# outcome differs from the locked run's (reports/test-lock.xml, written by `make test`). Reports land in reports/.
test-latest: browser
	$(PYTHON) tools/test_versions.py latest
test-oldest: browser
	$(PYTHON) tools/test_versions.py oldest

env: $(STAMP)

export: env
	$(VENV)/bin/nbdev-export
	$(PY) tools/make_readme.py

book: export
	OMP_NUM_THREADS=$(NB_THREADS) $(PY) tools/build_site.py --execute --workers $(WORKERS) $(SITE_FLAGS)
	@echo ""
	@echo "The book is in _site/. Open _site/index.html in a browser, or serve it with: make serve"

site: export
	$(PY) tools/build_site.py --workers $(WORKERS) $(SITE_FLAGS)

serve:
	$(PY) -m http.server --directory _site --bind 127.0.0.1 8000

test: env lint browser
	OMP_NUM_THREADS=$(NB_THREADS) $(VENV)/bin/nbdev-test --n-workers $(WORKERS) --timing
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup --no-loadscope-reorder --junitxml=reports/test-lock.xml

# ruff on the notebooks and every .py file, with the rules of [tool.ruff] in pyproject.toml (see CONTRIBUTING.md)
lint: env
	$(VENV)/bin/ruff check .

# Developers: re-execute notebooks in place so their saved outputs (plots) are current, then clean and export.
outputs: env
	OMP_NUM_THREADS=$(NB_THREADS) $(PY) tools/execute_nbs.py --inplace --workers $(WORKERS) $(NB)
	for f in $(NB); do $(VENV)/bin/nbdev-clean --fname $$f; done
	$(VENV)/bin/nbdev-export
	$(PY) tools/make_readme.py

bench: export
	for f in bench/bench_*.py; do $(PY) $$f || exit 1; done

# Long runs (seed sweeps, ablations, reference curves): each experiments/*.py writes transformerbook/results/<name>.json
experiments: export
	for f in experiments/*.py; do OMP_NUM_THREADS=$(NB_THREADS) $(PY) $$f || exit 1; done

# The site test drives a real headless Chromium. Install it where we can (root + apt), otherwise say how.
browser:
	@if [ -n "$$CHROMIUM" ] && [ -x "$$CHROMIUM" ]; then exit 0; fi; \
	for b in /usr/bin/chromium /usr/bin/chromium-browser /usr/bin/google-chrome; do [ -x $$b ] && exit 0; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing Chromium for the browser test (apt-get install chromium)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "The site test needs Chromium: install it (e.g. 'sudo apt-get install chromium') or set CHROMIUM=/path/to/chrome"; exit 1; \
	fi

clean:
	rm -rf _site _build _proc _docs .pytest_cache
