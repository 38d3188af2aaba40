# Two entry points after cloning (see README): `make lab` and `make test`.
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: setup lab test lint typecheck unit

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q -U pip setuptools wheel
	.venv/bin/pip install -q -e '.[test]'
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
