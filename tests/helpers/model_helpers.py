"""Small hand-built models shared by several test files (each built from the
op contract, not from the fuser)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper
from onnx import helper as h
from onnx import numpy_helper as nh

EXTERNAL_H = 64  # hidden size of external_model


def gelu_model(kind: str = "erf", dtype: int = T.FLOAT, ir: int = 10, dims=("batch", 8)) -> onnx.ModelProto:
    """y = GELU(x) spelled as: 'erf' decomposed (x/sqrt2), 'gelu20' ONNX Gelu,
    'wrong' decomposed with x/2 (not a GELU). fp16/bf16 I/O is cast to float
    around the math, as mixed-precision exports do (ORT CPU lacks bf16 math)."""
    x = helper.make_tensor_value_info("x", dtype, list(dims))
    y = helper.make_tensor_value_info("y", dtype, list(dims))
    nodes, inits = [], []
    src = "x"
    if dtype != T.FLOAT:
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT))
        src = "xf"
    out = "yf" if dtype != T.FLOAT else "y"
    if kind == "gelu20":
        nodes.append(helper.make_node("Gelu", [src], [out]))
    else:
        div = math.sqrt(2) if kind == "erf" else 2.0
        inits = [nh.from_array(np.array(v, np.float32), n) for n, v in (("c_div", div), ("c_one", 1.0), ("c_half", 0.5))]
        nodes += [
            helper.make_node("Div", [src, "c_div"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "c_one"], ["a"]),
            helper.make_node("Mul", [src, "a"], ["m"]),
            helper.make_node("Mul", ["m", "c_half"], [out]),
        ]
    if dtype != T.FLOAT:
        nodes.append(helper.make_node("Cast", ["yf"], ["y"], to=dtype))
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = ir
    return m


def save(m: onnx.ModelProto, path) -> str:
    onnx.save_model(m, str(path))
    return str(path)


def matmul_gelu_model(w: np.ndarray, path: Path, external: str | None = None) -> Path:
    """x @ W -> erf GELU, saved at ``path`` (W in the external file ``external``
    when given)."""
    n = w.shape[0]
    c = [h.make_tensor(k, T.FLOAT, [], [v]) for k, v in (("r2", 2**0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Div", ["m", "r2"], ["d"]),
             h.make_node("Erf", ["d"], ["e"]), h.make_node("Add", ["e", "one"], ["p"]),
             h.make_node("Mul", ["m", "p"], ["q"]), h.make_node("Mul", ["q", "half"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", n])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", n])], [nh.from_array(w, "W"), *c])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save(m, str(path), save_as_external_data=True, location=external, size_threshold=1024)
    else:
        onnx.save(m, str(path))
    return path


def external_model(folder: Path, data: str = "w.bin", seed: int = 0) -> Path:
    """x @ W (W in external file `data`) -> erf GELU."""
    w = np.random.default_rng(seed).standard_normal((EXTERNAL_H, EXTERNAL_H)).astype(np.float32)
    return matmul_gelu_model(w, folder / "model.onnx", data)


def odd_tensors() -> dict[str, onnx.TensorProto]:
    """A TensorProto stored each way the format allows, well-formed or not
    (the scanner's per-tensor columns and the validation of each tensor):
    raw_data, every typed field, strings, external, segment, doc, metadata,
    negative / zero / huge dims, unknown types."""
    def t(name, dtype, dims, **fields):
        x = onnx.TensorProto(name=name, data_type=dtype, dims=dims)
        for k, v in fields.items():
            if k == "external":
                x.data_location = onnx.TensorProto.EXTERNAL
                for key, val in v.items():
                    x.external_data.add(key=key, value=val)
            elif k == "metadata":
                x.metadata_props.add(key="k", value=v)
            elif k == "segment":
                x.segment.begin, x.segment.end = v
            elif isinstance(v, (list, tuple)):
                getattr(x, k).extend(v)
            else:
                setattr(x, k, v)
        return x

    f4 = np.arange(6, dtype=np.float32).tobytes()
    return {
        "raw": t("raw", T.FLOAT, [2, 3], raw_data=f4),
        "raw-scalar": t("", T.FLOAT, [], raw_data=f4[:4]),
        "raw-short": t("short", T.FLOAT, [2, 3], raw_data=f4[:8]),
        "raw-long": t("long", T.FLOAT, [2], raw_data=f4),
        "raw-empty": t("empty", T.INT64, [0, 5], raw_data=b""),
        "raw-int4": t("i4", T.INT4, [5], raw_data=b"\x12\x34\x05"),
        "raw-fp8": t("f8", T.FLOAT8E4M3FN, [2], raw_data=b"\x01\x02"),
        "float-data": t("fd", T.FLOAT, [3], float_data=[1.0, 2.0, 3.0]),
        "float-data-long": t("fdl", T.FLOAT, [2], float_data=[1.0, 2.0, 3.0]),
        "int32-data": t("i8", T.INT8, [2, 2], int32_data=[1, -2, 3, 4]),
        "int64-data": t("i64", T.INT64, [2], int64_data=[-1, 2 ** 40]),
        "double-data": t("d", T.DOUBLE, [1], double_data=[0.5]),
        "uint64-data": t("u64", T.UINT64, [2], uint64_data=[1, 2 ** 63]),
        "string-data": t("s", T.STRING, [2], string_data=[b"ab", b""]),
        "raw-and-typed": t("rt", T.FLOAT, [2], raw_data=f4[:8], float_data=[1.0]),
        "negative-dim": t("neg", T.FLOAT, [-1, 3], raw_data=f4),
        "huge-dims": t("huge", T.FLOAT, [2 ** 40, 2 ** 40, 0], raw_data=b""),
        "huge-count": t("hc", T.UINT8, [2 ** 31, 2 ** 31], raw_data=b"\x00"),
        "unknown-type": t("u", 99, [1], raw_data=b"\x00"),
        "undefined-type": t("und", T.UNDEFINED, [1], raw_data=b"\x00"),
        "external-escape": t("ext", T.FLOAT, [2], external={"location": "../outside.bin", "length": "8"}),
        "external-missing": t("extm", T.FLOAT, [2], external={"location": "w.bin"}),
        "external-entries-inside": _with_entries(t("exti", T.FLOAT, [1], raw_data=f4[:4])),
        "segment": t("seg", T.FLOAT, [6], raw_data=f4, segment=(0, 6)),
        "doc-and-metadata": t("doc", T.FLOAT, [1], raw_data=f4[:4], doc_string="why", metadata="v"),
    }


def _with_entries(x: onnx.TensorProto) -> onnx.TensorProto:
    x.external_data.add(key="location", value="w.bin")  # data_location stays DEFAULT
    return x


def constant_gelu_model() -> onnx.ModelProto:
    """gelu_model with its 0.5 a Constant node (so the graph has an attribute and an attribute tensor)."""
    m = gelu_model()
    half = m.graph.initializer.pop()
    assert half.name == "c_half"
    m.graph.node.insert(0, h.make_node("Constant", [], ["c_half"], value=half))
    return m


def unknown_field_models() -> dict[str, bytes]:
    """constant_gelu_model's bytes with, in one message each (the key), fields
    protobuf parses as unknown fields (kept, never read): known field numbers
    with another wire type, a group (onnx.proto declares none), a value
    outside a closed enum. Each parses to constant_gelu_model plus unknown
    fields ("every message": all of them at once); "attribute type 99" is
    the one onnx.checker refuses (its only type is one protobuf does not read)."""
    from gelu_onnx.onnxio.format import field_key, varint

    def v(n, x=1):
        return field_key(n, 0) + varint(x)

    def f32(n):
        return field_key(n, 5) + b"\0\0\x80\x3f"

    def f64(n):
        return field_key(n, 1) + bytes(8)

    def ld(n, p):
        return field_key(n, 2) + varint(len(p)) + p

    def group(n):  # a group holding a field and a nested group
        return field_key(n, 3) + v(1) + field_key(2, 3) + ld(3, b"x") + field_key(2, 4) + field_key(n, 4)

    extra = {
        "model": lambda m: (m, v(7) + ld(1, b"\x08") + v(8, 0) + group(7) + f32(14)),
        "graph": lambda m: (m.graph, v(1, 0) + f32(5) + f64(11) + v(12) + f32(13) + v(2) + group(1) + v(15, 0)),
        "node": lambda m: (m.graph.node[1], v(1) + f32(4) + v(5, 0) + f64(7) + group(5) + v(3, 0) + f32(10)),
        "attribute": lambda m: (m.graph.node[0].attribute[0],
                                v(1) + f32(5) + ld(20, b"\x04") + v(2) + group(5) + f32(10) + v(22, 0) + v(6, 0)
                                + f64(21)),
        "attribute tensor": lambda m: (m.graph.node[0].attribute[0].t, ld(2, b"\x01") + v(9) + f64(1) + v(14, 7)),
        "initializer": lambda m: (m.graph.initializer[0],
                                  ld(2, b"\x01") + f32(1) + v(9, 3) + f64(8) + v(14, 7) + group(9) + v(4) + f64(5)),
        "graph input": lambda m: (m.graph.input[0], v(1) + f32(2) + group(2)),
        "graph output": lambda m: (m.graph.output[0], f64(1) + v(2)),
        "attribute type 99": lambda m: (m.graph.node[0].attribute[0], v(20, 99)),
    }
    out, every = {}, constant_gelu_model()
    for where, add in extra.items():
        m = constant_gelu_model()
        msg, fields = add(m)
        if where == "attribute type 99":
            msg.ClearField("type")
        else:
            add(every)[0].MergeFromString(fields)
        msg.MergeFromString(fields)
        out[where] = m.SerializeToString()
    out["every message"] = every.SerializeToString()
    return out
