"""Polygraphy's JSON files, read and written without importing Polygraphy.

Two kinds (polygraphy/json/serde.py and polygraphy/comparator/struct.py,
Polygraphy 0.49-0.53):

- saved inputs (``polygraphy run --save-inputs in.json``): a list with one
  {input name: array} per iteration;
- RunResults (``--save-outputs golden.json``): {"lst": [[runner name,
  [IterationResult, ...]], ...], "polygraphy_class": "RunResults"}, where an
  IterationResult is {"outputs": {name: LazyArray}, "runtime", "runner_name"}
  and a LazyArray is {"values": array}.

An array is {"array": base64 of the bytes ``np.save(allow_pickle=False)``
writes, "polygraphy_class": "ndarray"} (files from old Polygraphy versions:
the key "__polygraphy_encoded_ndarray", or latin-1 text instead of base64),
decoded by gelu_onnx.verify.arrayfiles.
"""
from __future__ import annotations

import base64
import binascii
import io
import json
from typing import Callable, Mapping, Sequence

import numpy as np

from . import arrayfiles
from ..errors import InputError

TYPE_KEY = "polygraphy_class"
_LEGACY_PREFIX = "__polygraphy_encoded_"

# One run of a runner: its name and, per iteration, {output name: array}.
Run = tuple[str, list[dict[str, np.ndarray]]]


def is_json(path) -> bool:
    """Whether the file looks like JSON (its first non-blank byte); .npz is a zip."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return False
    return head[:1] in (b"[", b"{")


def _load(path, what: str):
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: absurd nesting
        raise InputError(f"{what}: cannot read it as JSON ({arrayfiles.first_line(e)})") from None


def _type_of(d) -> str | None:
    if not isinstance(d, dict):
        return None
    if isinstance(d.get(TYPE_KEY), str):
        return d[TYPE_KEY]
    for k in d:
        if isinstance(k, str) and k.startswith(_LEGACY_PREFIX):
            return k[len(_LEGACY_PREFIX):]
    return None


def _array(d, what: str, name: str, expect, allow_pickle: bool) -> np.ndarray:
    kind = _type_of(d)
    if kind in ("LazyArray", "LazyNumpyArray") and isinstance(d, dict) and "values" in d:
        return _array(d["values"], what, name, expect, allow_pickle)
    if kind == "Tensor":
        raise InputError(f"{what}: '{name}' is a torch tensor (stored with pickle); save numpy arrays instead")
    if kind != "ndarray" or not isinstance(d.get("array"), str):
        raise InputError(f"{what}: '{name}' is not a Polygraphy-encoded numpy array")
    text = d["array"]
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        try:  # Polygraphy < 0.36 wrote the bytes as latin-1 text
            data = text.encode("latin-1")
        except UnicodeEncodeError:
            raise InputError(f"{what}: '{name}' holds neither base64 nor latin-1 array data") from None
    awhat = f"{what}: '{name}'"
    if data[:2] == b"PK":  # very old Polygraphy: an .npz archive holding one array
        arrays = arrayfiles.read_npz(io.BytesIO(data), awhat, lambda _n, dt, sh: expect(name, dt, sh), allow_pickle)
        if len(arrays) != 1:
            raise InputError(f"{awhat}: expected one array in the embedded archive, found {len(arrays)}")
        return next(iter(arrays.values()))
    return arrayfiles.decode_npy(data, awhat, expect, name, allow_pickle)


def read_inputs(path, what: str, new_expect: Callable, allow_pickle: bool) -> list[dict[str, np.ndarray]]:
    """Per iteration {input name: array} from ``polygraphy run --save-inputs``.

    ``new_expect()`` gives a fresh header check per iteration (named dims
    must agree within one iteration, not across them); its ``names(keys)``
    sees the iteration's names before any array is decoded."""
    doc = _load(path, what)
    if isinstance(doc, dict) and _type_of(doc) is None and doc and all(_type_of(v) for v in doc.values()):
        doc = [doc]  # one feed dict, as Polygraphy's data loader scripts also accept
    if not isinstance(doc, list) or not all(isinstance(it, dict) for it in doc):
        raise InputError(f"{what}: not Polygraphy saved inputs (a JSON list of {{input name: array}})")
    if not doc:
        raise InputError(f"{what}: holds no iterations")
    out = []
    for i, it in enumerate(doc):
        expect = new_expect()
        expect.names(list(it))
        iwhat = what if len(doc) == 1 else f"{what} (iteration {i})"
        out.append({str(k): _array(v, iwhat, str(k), expect, allow_pickle) for k, v in it.items()})
    return out


def read_first_run(path, what: str, expect, allow_pickle: bool) -> Run:
    """(runner name, [{output name: array} per iteration]) of a RunResults file's first runner only."""
    doc = _load(path, what)
    if _type_of(doc) != "RunResults" or not isinstance(doc.get("lst"), list):
        hint = " (that is a saved-inputs file; golden outputs come from --save-outputs)" if isinstance(doc, list) else ""
        raise InputError(f"{what}: not a Polygraphy RunResults file{hint}")
    if not doc["lst"]:
        raise InputError(f"{what}: holds no runner results")
    entry = doc["lst"][0]
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
        raise InputError(f"{what}: malformed RunResults entry")
    runner, its = str(entry[0]), []
    for i, it in enumerate(entry[1]):
        outs = it.get("outputs") if isinstance(it, dict) else None
        if not isinstance(outs, dict):
            raise InputError(f"{what}: runner '{runner}' iteration {i} has no outputs")
        its.append({str(k): _array(v, f"{what} ({runner}, iteration {i})", str(k), expect, allow_pickle)
                    for k, v in outs.items()})
    return runner, its


def _encode(a: np.ndarray) -> dict:
    return {"array": base64.b64encode(arrayfiles.encode_npy(a)).decode("ascii"), TYPE_KEY: "ndarray"}


def inputs_doc(iterations: Sequence[Mapping[str, np.ndarray]]) -> list:
    return [{k: _encode(v) for k, v in feeds.items()} for feeds in iterations]


def run_results_doc(runs: Sequence[Run], runtimes: Mapping[str, Sequence[float]] | None = None) -> dict:
    lst = []
    for runner, iterations in runs:
        times = list((runtimes or {}).get(runner, []))
        its = [{"outputs": {k: {"values": _encode(v), TYPE_KEY: "LazyArray"} for k, v in outs.items()},
                "runtime": times[i] if i < len(times) else 0.0, "runner_name": runner, TYPE_KEY: "IterationResult"}
               for i, outs in enumerate(iterations)]
        lst.append([runner, its])
    return {"lst": lst, TYPE_KEY: "RunResults"}
