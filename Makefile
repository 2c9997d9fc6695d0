# The two commands of the README. Each sets everything up from scratch on a
# fresh machine (a virtualenv in .venv, the package built with CMake) and runs.
#   make demo   fuse every bundled model for every target and check parity
#   make test   the test suite (what CI runs)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup setup-test clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

setup: $(PY)
	$(PY) -m pip install -q -e .

setup-test: $(PY)
	$(PY) -m pip install -q -e ".[test]"

demo: setup
	$(PY) scripts/demo.py

test: setup-test
	$(PY) -m pytest -q -ra

clean:
	rm -rf $(VENV) build
