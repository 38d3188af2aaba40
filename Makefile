# Two entry points after cloning (see README): `make lab` and `make test`.
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: setup lab lab-tools prepare test checks lint typecheck unit

# The venv is installed with uv (from PyPI, pinned): it resolves the same versions as pip
# (same index, same `pip freeze`) in about 12 s where pip took 49 s on this machine, most of
# that pip's one-file-at-a-time unpacking and byte-compiling. uv lives in a small venv of its
# own outside the clone, made on first use; the project's venv is seeded with pip (the image
# build runs `pip download` in it).
UV_VERSION := 0.13.9
UV_HOME ?= $(HOME)/.cache/dra-multi-network/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv

$(UV):
	python3 -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q uv==$(UV_VERSION)

$(VENV_STAMP): pyproject.toml | $(UV)
	$(UV) venv -q --seed --allow-existing .venv
	VIRTUAL_ENV=$(CURDIR)/.venv $(UV) pip install -q --compile-bytecode -e '.[test]'
	touch $(VENV_STAMP)

setup: $(VENV_STAMP)

ROOT := $(filter 0,$(shell id -u))

# What the lab execs, present before anything else runs: python3's venv module (the uv
# bootstrap below) always; as root also `ip` and `ping` (the demo's Pods). As root the
# missing ones are installed with apt; otherwise the exact command is printed.
lab-tools:
	@machine/system-tools $(if $(ROOT),lab,lab-venv)

# The main job: lint the builtin programs, example topologies and example IPPools, then run
# the embedded lab's demo (lab up, the pools applied, every example topology Ready, one claim
# allocated, a negative example rejected, as root two Pods addressed from the pool pinging
# each other, lab down; exit 0 only if all of that held).
lab: lab-tools setup
	$(PY) -m dmn lint programs examples/topologies examples/ipam
	$(PY) -m dmn lab demo $(if $(ROOT),--links netns,)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: setup
	$(PY) -m mypy -p dmn

unit: setup
	$(PY) -m dmn generate --check
	$(PY) -m pytest

# Everything the tests need on a fresh Debian machine, as root (machine/prepare): system
# packages, the kernel-lab image, the venv, the container image and the upstream build.
prepare:
	@machine/prepare

# mypy's incremental cache outside the clone when root runs the whole suite (it checks every
# file by content hash, so a fresh clone re-checks only what changed: ~40 CPU-s a warm run)
test: export MYPY_CACHE_DIR ?= /var/cache/dmn-mypy
test: prepare
	@. machine/steps.sh && $(MAKE) --no-print-directory checks && step make-checks

checks: lint typecheck unit
