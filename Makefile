# The two commands the README starts with: `make demo` and `make test`, plus `make test-gpu`
# (the GPU check suite) on a GPU machine. All create .venv on first use from a lock file (exact
# versions and their hashes), so that every developer and every CI run test the same packages:
# a release elsewhere cannot turn CI red. torch is pinned to its CPU build where this machine
# keeps it on disk, so that no multi-GB CUDA wheel is pulled (the package itself asks
# torch>=2.7,<2.16: pyproject.toml).
# A GPU machine whose $(PYTHON) already imports a CUDA build of torch (matched to its driver)
# keeps it: the venv sees it (--system-site-packages) and tenter's other packages are resolved
# from pyproject's ranges beside it, since the locks pin torch 2.13.0 (TORCH=cpu forces the
# locked CPU build instead). A $(PYTHON) that is itself a venv (GPU images install torch into
# one) passes on only its base interpreter's packages: .venv is given its site-packages too
# (machine-torch.pth).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pip byte-compiles what it installs (torch's thousands of files: about 40 s of `setup`): kept,
# since an environment with PYTHONDONTWRITEBYTECODE (this machine's, CI's) would otherwise
# compile every module again in every process that imports it.
PIP := pip install -q --disable-pip-version-check
TORCH_WHEEL := $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl)
# A machine that keeps wheels on disk (CI here does) installs torch from there.
WHEELS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
# cpu.lock: torch's CPU build from /opt/wheels. pypi.lock: the same packages with PyPI's
# torch 2.13.0 (a CUDA build, which runs on CPU too) and the CUDA libraries it needs.
LOCK := requirements/$(if $(TORCH_WHEEL),cpu,pypi).lock
LATEST := .venv-latest
# examples/imagenet's torch and torchvision, a pair built for each other (requirements/vision.txt).
VISION := .venv-vision
TORCH ?= $(if $(shell $(PYTHON) -c "import torch; print(torch.version.cuda or '')" 2>/dev/null),system,cpu)

.PHONY: setup vision system-deps demo test test-gpu lint lock test-latest clean

$(BIN)/tenter: pyproject.toml $(LOCK)
ifeq ($(TORCH),system)
	@echo "keeping this machine's CUDA torch: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PYTHON) -c "import site; print(*site.getsitepackages(), sep='\\n')" \
		> "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/machine-torch.pth"
	$(BIN)/$(PIP) $(WHEELS) -e ".[examples,plot,dev]"
else
	$(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP) --require-hashes $(WHEELS) -r $(LOCK)
	$(BIN)/$(PIP) --no-deps -e .
endif
	touch $@

setup: $(BIN)/tenter

# A venv of its own, beside .venv: the example's test (tests/sagemaker_user/test_examples.py)
# runs its tenter. Built once (minutes: several GB); a change to its inputs re-runs pip over it,
# which keeps what still satisfies them. Its torch pair first, which needs nothing of .venv
# (`make test` installs both side by side); its editable tenter after .venv (order only): both
# pip runs build this checkout's editable tenter, in the same source tree.
$(VISION)/.packages: requirements/vision.txt
	$(PYTHON) -m venv $(VISION)
	$(VISION)/bin/$(PIP) $(WHEELS) -r requirements/vision.txt
	touch $@

$(VISION)/bin/tenter: pyproject.toml $(VISION)/.packages | $(BIN)/tenter
	$(VISION)/bin/$(PIP) $(WHEELS) -r requirements/vision.txt -e ".[vision]"
	touch $@

vision: $(VISION)/bin/tenter

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

# The venvs' installs (mostly disk writes) side by side, then the lint (mypy: a minute of CPU)
# beside the vision venv's editable tenter, each its output in one piece; then the tests.
test:
	$(MAKE) --jobs=2 --output-sync=target lint system-deps vision
	$(BIN)/python -m pytest tests

# The GPU check suite: every CUDA path on this machine's GPUs (tests marked `cuda`; skipped,
# and so empty, without CUDA). Needs only what `setup` installs beside the machine's torch.
test-gpu: setup
	$(BIN)/python -c "import torch; assert torch.cuda.is_available(), 'make test-gpu needs CUDA: this torch ' + torch.__version__ + ' sees no GPU'"
	nvidia-smi -L
	$(BIN)/python -m pytest -m cuda tests -v

# The lock files, from pyproject.toml's ranges (every extra `make setup` installs) and
# requirements/torch.in, for CPython 3.11 on Linux x86_64 (this machine's and CI's).
# cpu.lock records the hash of the wheel in /opt/wheels, so it is made where that wheel is.
LOCK_FROM := pyproject.toml requirements/torch.in --extra examples --extra plot --extra dev \
	--generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-header
lock: setup
	test -n "$(TORCH_WHEEL)" || { echo "cpu.lock needs /opt/wheels/torch-2.13.0+cpu-*.whl"; exit 2; }
	$(BIN)/uv pip compile $(LOCK_FROM) --find-links /opt/wheels -o requirements/cpu.lock
	$(BIN)/uv pip compile $(LOCK_FROM) -o requirements/pypi.lock

# Not part of CI: the suite on the newest versions pyproject.toml's ranges allow (torch stays
# the pinned build), so that an upgrade is taken on purpose: run it, fix, then `make lock`.
test-latest: system-deps
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/$(PIP) $(WHEELS) --upgrade --upgrade-strategy eager -c requirements/torch.in \
		-e ".[examples,plot,dev]"
	$(LATEST)/bin/pip freeze --exclude-editable > $(LATEST)/tested-versions.txt
	$(LATEST)/bin/ruff check src tests examples benchmarks
	$(LATEST)/bin/ruff format --check src tests examples benchmarks
	$(LATEST)/bin/mypy
	$(LATEST)/bin/lint-imports
	$(LATEST)/bin/python -m pytest tests

clean:
	rm -rf $(VENV) $(LATEST) $(VISION) tenter-jobs .pytest_cache .mypy_cache .ruff_cache
