"""The malformed and unsafe model files of the hostile suite, generated at
test time (no binaries in git), and how a library test observes them
(``no_hang``, ``assert_one_line``).  Used by the suite's ``corpus`` group
(every file through every command: corpus.py), by tests/test_onnxio_hostile.py
(the library) and tests/test_onnxio.py (its small real models).  Escape cases
point their external data at a FIFO outside the model folder: opening it for
reading would block, so ``no_hang`` turns any such read into a failure.
"""
from __future__ import annotations

import contextlib
import os
import random
import signal
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gelu_onnx.contract import SQRT2

# --- small real models ---------------------------------------------------------

F = TensorProto.FLOAT


def ffn_model(hidden: int = 16, opset: int = 17, ir: int = 10) -> onnx.ModelProto:
    """MatMul + bias Add + erf GELU (the exporter spelling), weights as initializers."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "B"),
        numpy_helper.from_array(np.array(SQRT2, np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "B"], ["h"], name="bias"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add1"),
        helper.make_node("Mul", ["h", "e1"], ["p"], name="mul"),
        helper.make_node("Mul", ["p", "half"], ["y"], name="half_mul"),
    ]
    g = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", F, [2, hidden])],
                          [helper.make_tensor_value_info("y", F, [2, hidden])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="test")
    m.ir_version = ir
    return m


def save_external(model: onnx.ModelProto, path: Path, location: str = "weights.bin") -> None:
    """onnx's own external-data writer (what exporters produce)."""
    (path.parent / location).parent.mkdir(parents=True, exist_ok=True)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnx.save moves the payloads out of the proto it is given
    onnx.save(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=location, size_threshold=1024)


def write_proto(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString())


def set_location(path: Path, **entries) -> None:
    """Rewrite the external_data entries of every external tensor of the model at path."""
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            info.update({k: v for k, v in entries.items() if v is not None})
            for k in [k for k, v in entries.items() if v is None]:
                info.pop(k, None)
            del t.external_data[:]
            for k, v in info.items():
                e = t.external_data.add()
                e.key, e.value = k, v
    write_proto(m, path)


# --- the corpus ----------------------------------------------------------------


@dataclass
class Case:
    model: Path        # the path handed to the tool
    expect: str        # regex the error line must match
    unsafe: bool = False  # must be refused as UnsafeModelError (escape attempts)


def layout(root: Path) -> tuple[Path, Path]:
    """root/model/ holds the model; root/outside/ is off limits (a FIFO and a secret)."""
    mdir, outside = root / "model", root / "outside"
    mdir.mkdir(parents=True)
    outside.mkdir()
    os.mkfifo(outside / "fifo")
    (outside / "secret.bin").write_bytes(b"S" * 4096)
    return mdir, outside


def _mutated(mutate):
    def build(root: Path) -> Path:
        mdir, _ = layout(root)
        m = ffn_model()
        mutate(m)
        write_proto(m, mdir / "m.onnx")
        return mdir / "m.onnx"
    return build


def _raw(data_fn):
    def build(root: Path) -> Path:
        mdir, _ = layout(root)
        (mdir / "m.onnx").write_bytes(data_fn())
        return mdir / "m.onnx"
    return build


def _external(edit):
    """A valid external-data model whose data reference is then tampered with."""
    def build(root: Path) -> Path:
        mdir, outside = layout(root)
        save_external(ffn_model(hidden=32), mdir / "m.onnx")
        edit(mdir, outside)
        return mdir / "m.onnx"
    return build


def _valid_bytes() -> bytes:
    return ffn_model().SerializeToString()


def _cycle(m):
    # erf reads e1, which depends on erf's own output
    m.graph.node[3].input[0] = "e1"


def _self_loop(m):
    m.graph.node[3].input[0] = "e"


def _duplicate_output(m):
    m.graph.node[4].output[0] = "e"


def _overwrite_initializer(m):
    m.graph.node[2].output[0] = "W"


def _dangling(m):
    m.graph.node[2].input[0] = "nowhere"


def _missing_initializer(m):
    del m.graph.initializer[0]  # W


def _unknown_domain(m):
    m.graph.node[3].domain = "my.ops"


def _unknown_op(m):
    m.graph.node[3].op_type = "FrobnicateGelu"


def _op_too_new(m):
    m.graph.node[3].op_type = "Gelu"  # exists only from opset 20; the model is opset 17


def _empty_graph(m):
    del m.graph.node[:]
    del m.graph.output[:]
    del m.graph.initializer[:]


def _no_outputs(m):
    del m.graph.output[:]


def _dangling_output(m):
    m.graph.output[0].name = "ghost"


def _dup_opset(m):
    m.opset_import.append(helper.make_opsetid("ai.onnx", 18))


def _nested_dangling(m):
    # an If whose then-branch reads a name defined nowhere (outer names would be legal)
    then = helper.make_graph([helper.make_node("Relu", ["phantom"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Relu", ["y"], ["t2"])], "else", [],
                              [helper.make_tensor_value_info("t2", F, None)])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="if0",
                                         then_branch=then, else_branch=other))
    m.graph.output.append(helper.make_tensor_value_info("z", F, None))


def _huge_sparse(root: Path) -> Path:
    mdir, _ = layout(root)
    p = mdir / "m.onnx"
    with open(p, "wb") as f:
        f.write(_valid_bytes())
        f.truncate(2**31 + 4096)  # sparse: no disk used
    return p


def _fifo_model(root: Path) -> Path:
    mdir, _ = layout(root)
    os.mkfifo(mdir / "m.onnx")
    return mdir / "m.onnx"


def _newline_name(root: Path) -> Path:
    mdir, _ = layout(root)
    p = mdir / "bad\nname\r.onnx"
    p.write_bytes(b"not a model\n")
    return p


def _dev_zero(root: Path) -> Path:
    mdir, _ = layout(root)
    (mdir / "m.onnx").symlink_to("/dev/zero")
    return mdir / "m.onnx"


def _directory(root: Path) -> Path:
    mdir, _ = layout(root)
    (mdir / "m.onnx").mkdir()
    return mdir / "m.onnx"


def _missing(root: Path) -> Path:
    mdir, _ = layout(root)
    return mdir / "nothing-here.onnx"


def _symlink_escape(mdir: Path, outside: Path) -> None:
    (mdir / "link.bin").symlink_to(outside / "fifo")
    set_location(mdir / "m.onnx", location="link.bin")


def _dir_symlink_escape(mdir: Path, outside: Path) -> None:
    (mdir / "sub").symlink_to(outside)
    set_location(mdir / "m.onnx", location="sub/fifo")


def _truncate_data(mdir: Path, outside: Path) -> None:
    with open(mdir / "weights.bin", "r+b") as f:
        f.truncate(100)


def _fifo_inside(mdir: Path, outside: Path) -> None:
    os.mkfifo(mdir / "pipe.bin")
    set_location(mdir / "m.onnx", location="pipe.bin")


def _data_is_dir(mdir: Path, outside: Path) -> None:
    (mdir / "wdir").mkdir()
    set_location(mdir / "m.onnx", location="wdir")


def _ext_tensor(name: str, location: str) -> TensorProto:
    t = TensorProto(name=name, data_type=F, dims=[4], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _escape_in_constant(m):
    m.graph.node.append(helper.make_node("Constant", [], ["k"], value=_ext_tensor("k", "../outside/fifo")))
    m.graph.output.append(helper.make_tensor_value_info("k", F, [4]))


def _escape_in_subgraph(m):
    # two levels deep: If -> If -> initializer pointing at an absolute path
    leaf_t = _ext_tensor("deep", "/etc/passwd")
    inner = helper.make_graph([helper.make_node("Identity", ["deep"], ["t"])], "inner", [],
                              [helper.make_tensor_value_info("t", F, None)], [leaf_t])
    plain = helper.make_graph([helper.make_node("Identity", ["y"], ["t1"])], "plain", [],
                              [helper.make_tensor_value_info("t1", F, None)])
    mid = helper.make_graph([helper.make_node("If", ["cond"], ["u"], name="if_inner",
                                              then_branch=inner, else_branch=plain)], "mid", [],
                            [helper.make_tensor_value_info("u", F, None)])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="if_outer",
                                         then_branch=mid, else_branch=plain))
    m.graph.output.append(helper.make_tensor_value_info("z", F, None))


def _escape_in_function(m):
    body = [helper.make_node("Constant", [], ["c"], value=_ext_tensor("c", "../outside/secret.bin")),
            helper.make_node("Add", ["a", "c"], ["b"])]
    f = helper.make_function("my.fn", "AddC", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    m.functions.append(f)
    m.opset_import.append(helper.make_opsetid("my.fn", 1))
    m.graph.node.append(helper.make_node("AddC", ["y"], ["z"], domain="my.fn"))
    m.graph.output.append(helper.make_tensor_value_info("z", F, None))


def _escape_in_sparse(m):
    sp = TensorProto()
    sp.CopyFrom(_ext_tensor("sp", "sub/../../outside/fifo"))
    st = helper.make_sparse_tensor(sp, numpy_helper.from_array(np.array([0, 1, 2, 3], np.int64), "sp_i"), [8])
    m.graph.sparse_initializer.append(st)


VALID = _valid_bytes()

CASES = {
    # not a model at all
    "empty-file": (_raw(lambda: b""), r"empty file"),
    "random-bytes-1k": (_raw(lambda: random.Random(1).randbytes(1024)), r"not (a valid )?(an )?ONNX"),
    "random-bytes-64k": (_raw(lambda: random.Random(2).randbytes(65536)), r"not (a valid )?(an )?ONNX"),
    "random-bytes-7": (_raw(lambda: random.Random(3).randbytes(7)), r"not (a valid )?(an )?ONNX"),
    "text-file": (_raw(lambda: b"This is not a model.\nJust some text, with a newline.\n"),
                  r"not (a valid )?(an )?ONNX"),
    "json-file": (_raw(lambda: b'{"ir_version": 8, "graph": {"node": []}}'), r"not (a valid )?(an )?ONNX"),
    "png-magic": (_raw(lambda: b"\x89PNG\r\n\x1a\n" + VALID[8:]), r"not (a valid )?(an )?ONNX"),
    "zip-magic": (_raw(lambda: b"PK\x03\x04" + VALID[4:]), r"not (a valid )?(an )?ONNX"),
    "wrong-first-byte": (_raw(lambda: b"\xff" + VALID[1:]), r"not (a valid )?(an )?ONNX"),
    "only-ir-version": (_raw(lambda: b"\x08\x07"), r"no graph"),
    # truncated valid models (every prefix is swept in a separate test)
    **{f"truncated-{k}": (_raw(lambda k=k: VALID[: max(1, int(len(VALID) * k / 100))]),
                          r"not (a valid )?(an )?ONNX|no opset_import|no graph")
       for k in (1, 10, 50, 90, 99)},
    # versions
    "ir-version-0": (_mutated(lambda m: setattr(m, "ir_version", 0)), r"ir_version is missing"),
    "ir-version-99": (_mutated(lambda m: setattr(m, "ir_version", 99)), r"IR version 99 is newer"),
    "ir-version-negative": (_mutated(lambda m: setattr(m, "ir_version", -3)), r"ir_version"),
    "opset-99": (_mutated(lambda m: setattr(m.opset_import[0], "version", 99)), r"opset 99 .* newer"),
    "opset-0": (_mutated(lambda m: setattr(m.opset_import[0], "version", 0)), r"invalid opset version"),
    "no-opset-import": (_mutated(lambda m: m.ClearField("opset_import")), r"no opset_import"),
    "duplicate-opset-import": (_mutated(_dup_opset), r"imports domain 'ai.onnx' twice"),
    # structure
    "cycle": (_mutated(_cycle), r"cycle"),
    "self-loop": (_mutated(_self_loop), r"cycle"),
    "duplicate-output-name": (_mutated(_duplicate_output), r"produced twice"),
    "overwrites-initializer": (_mutated(_overwrite_initializer),
                               r"overwrites graph input/initializer 'W'"),
    "dangling-input": (_mutated(_dangling), r"'nowhere', which is never defined"),
    "missing-initializer": (_mutated(_missing_initializer), r"'W', which is never defined"),
    "dangling-graph-output": (_mutated(_dangling_output), r"output 'ghost' .* never defined"),
    "dangling-in-subgraph": (_mutated(_nested_dangling), r"'phantom', which is never defined"),
    "duplicate-initializer": (_mutated(lambda m: m.graph.initializer.append(m.graph.initializer[1])),
                              r"two initializers named 'B'"),
    "unknown-domain": (_mutated(_unknown_domain), r"domain 'my.ops', which the model does not import"),
    "unknown-op": (_mutated(_unknown_op), r"unknown op 'FrobnicateGelu'"),
    "op-not-in-opset": (_mutated(_op_too_new), r"'Gelu' does not exist in ai.onnx opset 17"),
    "empty-graph": (_mutated(_empty_graph), r"graph is empty"),
    "no-graph-outputs": (_mutated(_no_outputs), r"no outputs"),
    "no-graph": (_mutated(lambda m: m.ClearField("graph")), r"no graph"),
    # the file itself
    "huge-single-file": (_huge_sparse, r"2 GiB"),
    "fifo-as-model": (_fifo_model, r"not a regular file"),
    "symlink-to-dev-zero": (_dev_zero, r"not a regular file"),
    "newline-in-file-name": (_newline_name, r"not (a valid )?(an )?ONNX"),
    "directory-as-model": (_directory, r"is a directory"),
    "nonexistent-path": (_missing, r"no such file"),
    # external data (escape attempts are UnsafeModelError)
    "ext-absolute-path": (_external(lambda d, o: set_location(d / "m.onnx", location=str(o / "fifo"))),
                          r"absolute path", True),
    "ext-absolute-secret": (_external(lambda d, o: set_location(d / "m.onnx", location=str(o / "secret.bin"))),
                            r"absolute path", True),
    "ext-dotdot": (_external(lambda d, o: set_location(d / "m.onnx", location="../outside/fifo")),
                   r"contains '\.\.'", True),
    "ext-dotdot-nested": (_external(lambda d, o: set_location(d / "m.onnx", location="a/../../outside/fifo")),
                          r"contains '\.\.'", True),
    "ext-backslash-dotdot": (_external(lambda d, o: set_location(d / "m.onnx", location="..\\outside\\fifo")),
                             r"contains '\.\.'", True),
    "ext-windows-drive": (_external(lambda d, o: set_location(d / "m.onnx", location="C:\\Windows\\win.ini")),
                          r"absolute path", True),
    "ext-symlink-outside": (_external(_symlink_escape), r"outside the model's folder", True),
    "ext-dir-symlink-outside": (_external(_dir_symlink_escape), r"outside the model's folder", True),
    "ext-nul-in-location": (_external(lambda d, o: set_location(d / "m.onnx", location="weights.bin\x00.txt")),
                            r"not a valid file name", True),
    "ext-basepath-key": (_external(lambda d, o: set_location(d / "m.onnx", basepath=str(o))),
                         r"unknown external_data key 'basepath'", True),
    "ext-fifo-inside": (_external(_fifo_inside), r"not a regular file", True),
    "ext-location-is-dir": (_external(_data_is_dir), r"not a regular file", True),
    "ext-missing-file": (_external(lambda d, o: (d / "weights.bin").unlink()), r"file not found"),
    "ext-offset-beyond": (_external(lambda d, o: set_location(d / "m.onnx", offset="1000000")),
                          r"needs bytes"),
    "ext-length-mismatch": (_external(lambda d, o: set_location(d / "m.onnx", length="8")),
                            r"does not match its shape"),
    "ext-truncated-data": (_external(_truncate_data), r"needs bytes"),
    "ext-bad-offset": (_external(lambda d, o: set_location(d / "m.onnx", offset="-5")),
                       r"invalid external_data offset"),
    "ext-in-constant-attr": (_mutated(_escape_in_constant), r"contains '\.\.'", True),
    "ext-in-nested-subgraph": (_mutated(_escape_in_subgraph), r"absolute path", True),
    "ext-in-function-body": (_mutated(_escape_in_function), r"contains '\.\.'", True),
    "ext-in-sparse-initializer": (_mutated(_escape_in_sparse), r"contains '\.\.'", True),
    "ext-no-location": (_external(lambda d, o: set_location(d / "m.onnx", location=None)), r"no location"),
}

# not regular files, or too big: only the path API sees these
FILE_ONLY = (_missing, _directory, _fifo_model, _dev_zero, _huge_sparse)


def build_case(name: str, root: Path) -> Case:
    builder, expect, *unsafe = CASES[name]
    return Case(builder(root), expect, bool(unsafe and unsafe[0]))


# --- observation helpers ---------------------------------------------------------


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """Fail instead of hanging if something opens one of our FIFOs."""
    def boom(*_):
        raise TimeoutError("blocked: something opened a FIFO it must never read")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def assert_one_line(msg: str) -> None:
    assert msg and msg.strip() == msg and "\n" not in msg and "\r" not in msg, repr(msg)
    assert "Traceback" not in msg
