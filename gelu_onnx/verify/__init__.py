"""Proving a fused model computes what the original did, the parts kept apart
as Polygraphy keeps them: inputs (inputs, feedfiles, arrayfiles, polyjson) ->
runners -> reference -> comparator and verdict -> parity_check, the check
(not check.py: ``from gelu_onnx.verify import check`` is the function).
bench times two models side by side."""
from __future__ import annotations

from .comparator import compare, compare_one, ulp_distance
from .feedfiles import load_npz, save_npz
from .inputs import INT_HIGH_DEFAULT, make_inputs
from .parity_check import check
from .runners import load, make_session_options, run

__all__ = ["INT_HIGH_DEFAULT", "check", "compare", "compare_one", "load", "load_npz", "make_inputs",
           "make_session_options", "run", "save_npz", "ulp_distance"]
