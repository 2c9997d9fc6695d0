"""Proving a fused model computes what the original did, the way Polygraphy
keeps the parts apart: inputs (declared inputs, seeded random feeds, user
files: feedfiles / arrayfiles / polyjson) -> runners (ONNX Runtime,
TensorRT; one ``run(feeds)``) -> comparator (per output errors against the
dtype's tolerance) -> parity_check (the check: iterations, providers,
--localize per GELU, reports). bench times two models side by side.

The comparison and the check live in comparator.py and parity_check.py, not
compare.py / check.py: this package exports the functions ``compare`` and
``check``, and a submodule of the same name would be shadowed by them
(``from gelu_onnx.verify import check`` must mean one thing).
"""
from __future__ import annotations

from .comparator import OutputParity, compare, compare_one, json_safe, tolerance_for, ulp_distance
from .feedfiles import load_npz, save_npz
from .inputs import (DIM_DEFAULT, INT_HIGH_DEFAULT, MAX_RANDOM_ELEMENTS, InputSpec, describe_inputs, dtype_name,
                     dtype_str, input_specs, make_inputs, np_dtype_of)
from .parity_check import CheckReport, check
from .runners import (OPT_LEVELS, PROVIDERS, OrtRunner, TensorRTRunner, library_available, load,
                      make_session_options, model_label, ort_providers, resolve_library, run, runner)

__all__ = ["CheckReport", "DIM_DEFAULT", "INT_HIGH_DEFAULT", "InputSpec", "MAX_RANDOM_ELEMENTS", "OPT_LEVELS",
           "OrtRunner", "OutputParity", "PROVIDERS", "TensorRTRunner", "check", "compare", "compare_one",
           "describe_inputs", "dtype_name", "dtype_str", "input_specs", "json_safe", "library_available", "load",
           "load_npz", "make_inputs", "make_session_options", "model_label", "np_dtype_of", "ort_providers",
           "resolve_library", "run", "runner", "save_npz", "tolerance_for", "ulp_distance"]
