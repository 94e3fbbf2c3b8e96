# Entry points. Needs only Python 3.11+ and Java 17+ (and access to PyPI for `make venv`).
#   make venv   create .venv and install the project with its dev tools
#   make test   lint (ruff, import contracts) and run the test suite (both cores)
#   make test-fast  lint and the unit tier only (no Spark, no Ray): the inner loop
#   make demo   run the demo
#   make bench  run the engine benchmark, JSON on stdout

SHELL := /bin/bash
VENV ?= .venv
# Interpreters tried for the venv, first that is Python 3.11+ wins (override: make PYTHON=...).
PYTHON ?=
PYTHON_CANDIDATES := python3.11 python3.12 python3.13 python3
STAMP := $(VENV)/.installed

.PHONY: venv protos check-java test test-fast lint demo bench clean distclean

# pytest on both cores: each test module runs whole on one worker (its module-scoped
# fixtures, a Spark session or a service, are built once), the longest modules first
# (tests/conftest.py orders them by their measured times). The full suite uses three
# workers on two cores: while one waits on a server start or a Ray recovery, the other
# two compute (docs/testing.md has the profile); the unit tier never waits, so two.
PYTEST_PARALLEL := -n 3 --dist loadfile
PYTEST_UNIT_PARALLEL := -n 2 --dist loadfile

venv: $(STAMP)

$(VENV)/bin/python:
	@set -e; \
	found=""; seen=""; \
	for py in $(or $(PYTHON),$(PYTHON_CANDIDATES)); do \
	  command -v "$$py" >/dev/null 2>&1 || continue; \
	  if "$$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; then \
	    found="$$py"; break; \
	  fi; \
	  seen="$${seen:+$$seen, }$$py ($$("$$py" --version 2>&1 | head -n 1))"; \
	done; \
	if [ -z "$$found" ]; then \
	  echo "error: Python 3.11+ is required to create $(VENV) — found: $${seen:-none of $(or $(PYTHON),$(PYTHON_CANDIDATES)) on PATH}" >&2; \
	  exit 1; \
	fi; \
	echo "creating $(VENV) with $$found ($$("$$found" --version 2>&1))"; \
	"$$found" -m venv "$(VENV)" || { \
	  echo "error: '$$found -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2; \
	  rm -rf "$(VENV)"; exit 1; }

# Re-install only when pyproject.toml changed since the last successful install.
$(STAMP): pyproject.toml | $(VENV)/bin/python
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(VENV)/bin/python -m pip install -q -e '.[dev]'
	@touch $@

# The gRPC stubs are generated from protos/ by the package build (setup.py) and, when stale,
# on import (services/protogen.py); this target regenerates them explicitly.
protos: venv
	$(VENV)/bin/python -m services.protogen

check-java:
	@java="$${JAVA_HOME:+$$JAVA_HOME/bin/}java"; \
	if ! command -v "$$java" >/dev/null 2>&1; then \
	  where=$${JAVA_HOME:+"at $$java (JAVA_HOME)"}; \
	  echo "error: Java 17+ is required (install e.g. openjdk-17-jre-headless) — found: no java $${where:-on PATH}" >&2; \
	  exit 1; \
	fi; \
	line=$$("$$java" -version 2>&1 | head -n 1); \
	ver=$$(printf '%s\n' "$$line" | sed -n 's/.*version "\([^"]*\)".*/\1/p'); \
	major=$${ver%%[.+-]*}; \
	if [ "$$major" = "1" ]; then major=$$(printf '%s\n' "$$ver" | cut -d. -f2); fi; \
	case "$$major" in ''|*[!0-9]*) major=0;; esac; \
	if [ "$$major" -lt 17 ]; then \
	  echo "error: Java 17+ is required (install e.g. openjdk-17-jre-headless) — found: $$line" >&2; \
	  exit 1; \
	fi

# ruff, then the import contracts of pyproject.toml's [tool.importlinter] (layers, no cycles)
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: venv check-java lint
	$(VENV)/bin/pytest -q $(PYTEST_PARALLEL) --durations=15

test-fast: venv lint
	$(VENV)/bin/pytest -q $(PYTEST_UNIT_PARALLEL) tests/unit

demo: venv check-java
	$(VENV)/bin/imp demo

bench: venv
	$(VENV)/bin/imp bench engine --json

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .hypothesis bench-results
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
