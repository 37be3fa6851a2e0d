# The two commands the README starts with: `make demo` and `make test`, plus `make test-gpu`
# (the GPU check suite) on a GPU machine. All create .venv on first use.
# torch: a machine whose $(PYTHON) already imports a CUDA build of torch (a GPU machine's own,
# matched to its driver) keeps it: the venv sees it (--system-site-packages) and nothing
# replaces it. Elsewhere torch is pinned to the CPU build, so that no multi-GB CUDA wheel is
# ever pulled (the package itself only asks torch>=2.7,<2.16). TORCH=cpu forces the pin.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
# A machine that keeps wheels on disk (CI here does) installs torch from there.
WHEELS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
TORCH ?= $(if $(shell $(PYTHON) -c "import torch; print(torch.version.cuda or '')" 2>/dev/null),system,cpu)

.PHONY: setup system-deps demo test test-gpu lint clean

$(BIN)/tenter: pyproject.toml
ifeq ($(TORCH),system)
	@echo "keeping this machine's CUDA torch: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"
	$(PYTHON) -m venv --system-site-packages $(VENV)
else
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(WHEELS) "$(TORCH_PIN)"
endif
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

# The GPU check suite: every CUDA path on this machine's GPUs (tests marked `cuda`; skipped,
# and so empty, without CUDA). Needs only what `setup` installs beside the machine's torch.
test-gpu: setup
	$(BIN)/python -c "import torch; assert torch.cuda.is_available(), 'make test-gpu needs CUDA: this torch ' + torch.__version__ + ' sees no GPU'"
	nvidia-smi -L
	$(BIN)/python -m pytest -m cuda tests -v

clean:
	rm -rf $(VENV) tenter-jobs .pytest_cache .mypy_cache .ruff_cache
