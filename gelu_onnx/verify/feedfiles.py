"""A user's input and golden-output files, checked against the model:
``--inputs`` (an .npz, or Polygraphy's saved inputs, JSON), ``--reference-outputs``
(Polygraphy's RunResults JSON). Every array's dtype and shape is checked
against the model before it is built (arrayfiles: size and pickle rules);
the files are only read. Saves are atomic (--save-inputs, --save-outputs).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from . import arrayfiles, inputs, polyjson
from .. import contract
from ..errors import InputError
from ..interrupts import critical, fault, unwinding
from ..onnxio import check_output_path
from ..onnxio.fileops import Folder, cleanup, new_mode, tmp_in

_BF16 = contract.np_dtype(TensorProto.BFLOAT16)


class _Expect:
    """Header check for one iteration's arrays against declared tensors.

    ``specs``: {name: (elem_type, dims)} with dims int (fixed), str (named)
    or None (unknown); ``known``: every name the file may hold (None: any)."""

    def __init__(self, what: str, specs: Mapping[str, tuple], known: set | None, required: Sequence[str]):
        self.what, self.specs, self.known, self.required = what, specs, known, list(required)
        self.seen_dims: dict[str, tuple[int, str]] = {}

    def names(self, names) -> None:
        missing = [n for n in self.required if n not in names]
        if missing:
            raise InputError(f"{self.what}: missing input(s) {', '.join(missing)} "
                             f"(the model needs: {', '.join(self.required)})")
        if self.known is not None:
            extra = sorted(set(names) - self.known)
            if extra:
                raise InputError(f"{self.what}: '{extra[0]}' is not an input of the model "
                                 f"(inputs: {', '.join(sorted(self.known))})")

    def __call__(self, name: str, dtype: np.dtype, shape: tuple) -> None:
        spec = self.specs.get(name)
        if spec is None:
            return
        et, dims = spec
        if not _dtype_ok(et, dtype):
            raise InputError(f"{self.what}: '{name}' is {inputs.dtype_str(dtype)}, the model declares "
                             f"{inputs.dtype_name(et)}")
        if dims is None:
            return
        if len(shape) != len(dims):
            raise InputError(f"{self.what}: '{name}' has rank {len(shape)} {list(shape)}, the model declares "
                             f"rank {len(dims)} {_show(dims)}")
        for got, d in zip(shape, dims):
            if isinstance(d, int) and got != d:
                raise InputError(f"{self.what}: '{name}' has shape {list(shape)}, the model declares {_show(dims)}")
            if isinstance(d, str):
                prev = self.seen_dims.setdefault(d, (got, name))
                if prev[0] != got:
                    raise InputError(f"{self.what}: dim '{d}' is {prev[0]} in '{prev[1]}' but {got} in '{name}'")


def _dtype_ok(et: int, dtype: np.dtype) -> bool:
    if et == TensorProto.STRING:
        return dtype.kind in "OUS"
    if et == TensorProto.BFLOAT16 and dtype in (np.dtype("V2"), np.dtype(np.uint16), _BF16):
        return True
    try:
        return dtype == inputs.np_dtype_of(et)
    except Exception:  # noqa: BLE001 - a type numpy has no spelling for here
        return False


def _finish(a: np.ndarray, et: int | None) -> np.ndarray:
    """bfloat16 bit patterns as ml_dtypes.bfloat16; strings as objects (what ORT takes)."""
    if et == TensorProto.BFLOAT16 and a.dtype != _BF16:
        return a.view(_BF16)
    if et == TensorProto.STRING and a.dtype.kind in "US":
        return a.astype(object)
    return a


def _show(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _need_file(path, what: str) -> None:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what}: no such file")
    if not p.is_file():
        raise InputError(f"{what}: not a regular file")


def load_inputs(path, model: onnx.ModelProto, *, allow_pickle: bool = False) -> list[dict[str, np.ndarray]]:
    """Feeds per iteration from an .npz (one) or Polygraphy JSON (one or more):
    every required input with the declared dtype, rank and fixed dims; one
    named dim one size across an iteration's inputs; names that are not graph
    inputs refused (a typo would otherwise fall back silently). bfloat16 may
    be stored as ml_dtypes.bfloat16 ('V2') or as uint16 bit patterns."""
    what = f"--inputs {path}"
    _need_file(path, what)
    specs = {s.name: (s.elem_type, s.dims) for s in inputs.input_specs(model)}
    known = {vi.name for vi in model.graph.input}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input if vi.type.HasField("tensor_type")}

    def new_expect():
        return _Expect(what, specs, known, list(specs))

    if polyjson.is_json(path):
        iterations = polyjson.read_inputs(path, what, new_expect, allow_pickle)
        return [{k: _finish(v, types.get(k)) for k, v in feeds.items()} for feeds in iterations]
    if _is_npy(path):
        raise InputError(f"{what}: a single .npy array, expected an .npz archive (np.savez writes one) "
                         "or Polygraphy JSON")
    ex = new_expect()
    arrays = arrayfiles.read_npz(path, what, ex, allow_pickle, on_names=ex.names)
    return [{k: _finish(v, types.get(k)) for k, v in arrays.items()}]


def load_npz(path, model: onnx.ModelProto, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """load_inputs' first iteration."""
    return load_inputs(path, model, allow_pickle=allow_pickle)[0]


def _is_npy(path) -> bool:
    with open(path, "rb") as f:
        return f.read(6) == b"\x93NUMPY"


def load_reference_outputs(path, model: onnx.ModelProto, *,
                           allow_pickle: bool = False) -> tuple[str, list[dict[str, np.ndarray]]]:
    """(runner name, outputs per iteration) of a Polygraphy RunResults file's
    first runner (``polygraphy run ORIG --onnxrt --save-outputs`` has one).
    Outputs the model declares are checked before they are decoded; others
    are kept (the comparison reports them as missing from the model)."""
    what = f"--reference-outputs {path}"
    _need_file(path, what)
    if not polyjson.is_json(path):
        raise InputError(f"{what}: not a Polygraphy RunResults JSON file (polygraphy run --save-outputs writes one)")
    specs, types = {}, {}
    for vi in model.graph.output:
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            if tt.elem_type:
                specs[vi.name] = (tt.elem_type, inputs.declared_dims(tt))
                types[vi.name] = tt.elem_type
    runner, iterations = polyjson.read_first_run(path, what, _Expect(what, specs, None, []), allow_pickle)
    return runner, [{k: _finish(v, types.get(k)) for k, v in it.items()} for it in iterations]


def _write_atomic(path, what: str, write) -> None:
    """``write(binary file)`` to a temp file in the target folder, renamed over
    ``path`` last: a failure or a signal leaves what was there and no temp
    file (parity_check checked every save path before anything ran)."""
    try:
        _, out, _ = check_output_path(path, replaceable=is_array_file)
    except InputError as e:
        raise InputError(f"{what} {e.message}") from None
    folder = Folder(os.path.realpath(os.path.dirname(out)), f"{what} {path}")  # every name through it
    p = Path(folder.path) / os.path.basename(out)
    pending: list = []
    with unwinding():
        try:
            try:
                fd, tmp = tmp_in(folder.path, p.name, pending, str(p), new_mode(str(p)))
            except OSError as e:  # read-only folder, ...
                raise InputError(f"{what} {path}: cannot write there ({e.strerror or e})") from None
            with os.fdopen(fd, "wb") as f:
                write(f)
            fault("save:written")
            with critical():
                os.replace(tmp, p)
                pending.clear()
        except OSError as e:  # name too long, disk full, ...
            cleanup(pending, [])
            raise InputError(f"{what} {path}: cannot write it ({e.strerror or e})") from None
        except BaseException:
            cleanup(pending, [])
            raise
        finally:
            folder.close()


def is_array_file(path) -> bool:
    """Whether an existing file is one a save may replace: an .npz (a zip
    archive) or JSON, as --save-inputs / --save-outputs write them."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head[:4] in (b"PK\x03\x04", b"PK\x05\x06") or head.lstrip()[:1] in (b"[", b"{")


def _write_json(doc, path, what: str) -> None:
    _write_atomic(path, what, lambda f: f.write(json.dumps(doc, indent=4).encode()))


def save_npz(feeds: Mapping[str, np.ndarray], path) -> None:
    """One iteration as .npz (bfloat16 as uint16 bit patterns, which load_inputs reads back)."""
    _write_atomic(path, "--save-inputs", lambda f: np.savez(f, **_plain(feeds)))


def save_inputs(iterations: Sequence[Mapping[str, np.ndarray]], path) -> None:
    """.json: Polygraphy's saved-inputs format (every iteration); else .npz (one)."""
    if str(path).lower().endswith(".json"):
        _write_json(polyjson.inputs_doc([_plain(f) for f in iterations]), path, "--save-inputs")
        return
    if len(iterations) != 1:
        raise InputError(f"--save-inputs {path}: an .npz holds one iteration; use a .json file for {len(iterations)}")
    save_npz(iterations[0], path)


def _plain(feeds: Mapping[str, np.ndarray]) -> dict:
    """bfloat16 as uint16 bit patterns: numpy (and so Polygraphy) loads those."""
    return {k: (v.view(np.uint16) if v.dtype == _BF16 else v) for k, v in feeds.items()}


def save_outputs(runs, path, runtimes=None) -> None:
    """Polygraphy RunResults JSON (``polygraphy inspect data`` reads it)."""
    runs = [(name, [_plain(o) for o in its]) for name, its in runs]
    _write_json(polyjson.run_results_doc(runs, runtimes), path, "--save-outputs")
