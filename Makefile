# The two commands the README starts with: `make demo` and `make test`.
# Both create .venv on first use; torch is pinned to the CPU build so that
# no multi-GB CUDA wheel is ever pulled (the package itself asks torch>=2.7,<2.16).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
# A machine that keeps wheels on disk (CI here does) installs torch from there.
WHEELS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: setup system-deps demo test lint clean

$(BIN)/tenter: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(WHEELS) "$(TORCH_PIN)"
	$(BIN)/pip install -q --disable-pip-version-check $(WHEELS) -e ".[examples,plot,dev]"
	touch $@

setup: $(BIN)/tenter

demo: setup
	$(BIN)/tenter run examples/digits/job.yaml

# Debian packages some tests use for real (fi_info...): installs what is missing (as root).
system-deps:
	bash scripts/install-system-deps.sh

lint: setup
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint system-deps
	$(BIN)/python -m pytest tests

clean:
	rm -rf $(VENV) tenter-jobs .pytest_cache .mypy_cache .ruff_cache
