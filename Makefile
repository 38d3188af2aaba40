# Two entry points after cloning (see README): `make lab` and `make test`.
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: setup lab test lint typecheck unit

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

# The main job: lint the builtin programs and example topologies, then run the embedded
# lab's demo (lab up, every example topology Ready, one claim allocated, a negative example
# rejected, lab down; exit 0 only if all of that held).
lab: setup
	$(PY) -m dmn lint programs examples/topologies
	$(PY) -m dmn lab demo $(if $(filter 0,$(shell id -u)),--links netns,)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: setup
	$(PY) -m mypy -p dmn

unit: setup
	$(PY) -m dmn generate --check
	$(PY) -m pytest

test: lint typecheck unit
