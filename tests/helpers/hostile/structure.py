"""The hostile suite, groups bomb (structural bombs), const (read what
the runtime reads) and names (non-UTF-8 and over-long paths, strict
encodings, usage errors)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from helpers.hostile.judge import Attack
from helpers.hostile.cases import IO, SQRT2, case, consts, erf_chain, ext, fused, model, raw, runs_in_ort, same_function


# --- bomb: structural bombs ---------------------------------------------------------------


def _nested_if(depth: int) -> onnx.ModelProto:
    """A GELU inside ``depth`` nested If branches (each If: cond -> then/else)."""
    inner = h.make_graph(erf_chain("x", "s2", "y0"), "b0", [], [h.make_tensor_value_info("y0", T.FLOAT, [3, 4])])
    for k in range(1, depth + 1):
        other = h.make_graph([h.make_node("Identity", ["x"], [f"z{k}"])], f"e{k}", [],
                             [h.make_tensor_value_info(f"z{k}", T.FLOAT, [3, 4])])
        node = h.make_node("If", ["c"], [f"y{k}"], then_branch=inner, else_branch=other, name=f"if{k}")
        inner = h.make_graph([node], f"b{k}", [], [h.make_tensor_value_info(f"y{k}", T.FLOAT, [3, 4])])
    top = [h.make_node("Identity", [f"y{depth}"], ["y"])]
    return model(inner.node[:] + top, consts("one", "half", "s2"),
                 inputs=[IO[0][0], h.make_tensor_value_info("c", T.BOOL, [])])


@case("bomb")
def _gelu_in_20_nested_ifs(root):
    src = raw(root / "m.onnx", _nested_if(20))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",))


def _ld(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (protobuf's Python API refuses to
    build messages this deep, so the bomb is written by hand)."""
    def varint(v):
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        return bytes(out + bytes([v]))
    return varint(field << 3 | 2) + varint(len(payload)) + payload


@case("bomb")
def _200_nested_ifs(root):
    vi = lambda n: _ld(1, n.encode())  # noqa: E731 - ValueInfoProto.name
    graph = _ld(1, _ld(1, b"x") + _ld(2, b"y0") + _ld(4, b"Identity")) + _ld(2, b"g0") + _ld(12, vi("y0"))
    for k in range(1, 201):  # GraphProto{node: If(c, then_branch=<graph>), output}
        attr = _ld(1, b"then_branch") + _ld(6, graph) + bytes([0xA0, 0x01, 5])  # type = GRAPH
        node = _ld(1, b"c") + _ld(2, f"y{k}".encode()) + _ld(4, b"If") + _ld(5, attr)
        graph = _ld(1, node) + _ld(2, f"g{k}".encode()) + _ld(12, vi(f"y{k}"))
    head = model([h.make_node("Identity", ["x"], ["y"])])
    head.ClearField("graph")
    (root / "m.onnx").write_bytes(head.SerializeToString() + _ld(7, graph))
    return Attack(["fuse", root / "m.onnx", "-o", root / "f.onnx"], False)


@case("bomb")
def _100k_inputs_and_outputs(root):
    n = 100_000
    ins = [h.make_tensor_value_info(f"i{k}", T.FLOAT, [1]) for k in range(n)]
    outs = [h.make_tensor_value_info(f"o{k}", T.FLOAT, [1]) for k in range(n)]
    nodes = [h.make_node("Identity", [f"i{k}"], [f"o{k}"]) for k in range(n)]
    src = raw(root / "m.onnx", model(nodes, inputs=ins, outputs=outs))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",), timeout=120)


@case("bomb")
def _a_million_ints_in_one_attribute(root):
    shape = h.make_node("Constant", [], ["shape"], value_ints=[1] * 1_000_000)
    nodes = [shape, h.make_node("Identity", ["shape"], ["z"])] + erf_chain("x", "s2")
    src = raw(root / "m.onnx", model(nodes, consts("one", "half", "s2"),
                                     outputs=[IO[1][0], h.make_tensor_value_info("z", T.INT64, [1_000_000])]))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",))


@case("bomb")
def _value_info_declaring_2_to_62(root):
    m = model(erf_chain("x", "s2"), consts("one", "half", "s2"))
    m.graph.value_info.append(h.make_tensor_value_info("d", T.FLOAT, [1 << 62, 1 << 62]))
    return Attack(["fuse", raw(root / "m.onnx", m), "-o", root / "f.onnx"], False)


@case("bomb")
def _tensor_dims_past_2_to_63(root):
    w = onnx.TensorProto(name="W", data_type=T.FLOAT, dims=[1 << 32, 1 << 32, 4])
    m = model([h.make_node("Add", ["x", "W"], ["y"])], [w])
    return Attack(["fuse", raw(root / "m.onnx", m), "-o", root / "f.onnx"], False)


def _external_entry(root, **entries):
    src = ext(root / "m")
    m = onnx.load(str(src), load_external_data=False)
    t = m.graph.initializer[0]
    info = {e.key: e.value for e in t.external_data}
    info.update(entries)
    del t.external_data[:]
    for k, v in info.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return raw(src, m)


@case("bomb")
def _external_offset_near_2_to_63(root):
    src = _external_entry(root, offset=str(2**63 - 16))
    return Attack(["fuse", src, "-o", root / "f.onnx"], False)


@case("bomb")
def _external_length_2_to_64(root):
    src = _external_entry(root, length=str(2**64))
    return Attack(["inspect", src], False)


@case("bomb")
def _external_offset_negative(root):
    src = _external_entry(root, offset="-4096")
    return Attack(["check", src, src], False)


def _function_chain(n: int, recursive_via_if: bool = False) -> onnx.ModelProto:
    fs = []
    for k in range(n):
        if k == n - 1:
            body = [h.make_node("Constant", [], [c], value_float=v) for c, v in (("s2", SQRT2), ("one", 1.0),
                                                                                   ("half", 0.5))]
            body += erf_chain("a", "s2", "b")
            if recursive_via_if:
                call = h.make_graph([h.make_node("F0", ["a"], ["r"], domain="loc")], "g",
                                    [], [h.make_tensor_value_info("r", T.FLOAT, None)])
                body = [h.make_node("Constant", [], ["c"], value=h.make_tensor("c", T.BOOL, [], [False])),
                        h.make_node("If", ["c"], ["b"], then_branch=call,
                                    else_branch=h.make_graph(body, "e", [], [h.make_tensor_value_info("b", T.FLOAT,
                                                                                                    None)]))]
        else:
            body = [h.make_node(f"F{k + 1}", ["a"], ["b"], domain="loc")]
        fs.append(h.make_function("loc", f"F{k}", ["a"], ["b"], body, [h.make_opsetid("", 17),
                                                                     h.make_opsetid("loc", 1)]))
    return model([h.make_node("F0", ["x"], ["y"], domain="loc")], functions=fs, domains=["loc"])


@case("bomb")
def _3000_functions_calling_each_other(root):
    src = raw(root / "m.onnx", _function_chain(3000))
    return Attack(["fuse", src, "-o", root / "f.onnx"], None, may_change=(root / "f.onnx",), timeout=120)


@case("bomb")
def _function_call_bomb(root):
    """F_k calls F_k+1 twice, 40 levels: 2^40 nodes once expanded (onnx.checker
    and ONNX Runtime's inliner expand every call): refused, not walked."""
    ops = [h.make_opsetid("", 17), h.make_opsetid("loc", 1)]
    fs = [h.make_function("loc", "F40", ["a"], ["b"], [h.make_node("Relu", ["a"], ["b"])], ops)]
    for k in range(39, -1, -1):
        body = [h.make_node(f"F{k + 1}", ["a"], ["t"], domain="loc"), h.make_node(f"F{k + 1}", ["t"], ["b"], domain="loc")]
        fs.append(h.make_function("loc", f"F{k}", ["a"], ["b"], body, ops))
    src = raw(root / "m.onnx", model([h.make_node("F0", ["x"], ["y"], domain="loc")], functions=fs, domains=["loc"]))
    return Attack(["fuse", src, "-o", root / "f.onnx"], False, timeout=60)


@case("bomb")
def _function_recursion_through_a_subgraph(root):
    src = raw(root / "m.onnx", _function_chain(3, recursive_via_if=True))
    return Attack(["fuse", src, "-o", root / "f.onnx"], False)


@case("bomb")
def _a_10_mb_tensor_name(root):
    name = "n" * (10 << 20)
    m = model(erf_chain("x", "s2", name) + [h.make_node("Identity", [name], ["y"])], consts("one", "half", "s2"))
    src = raw(root / "m.onnx", m)
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",),
                  after=same_function(src, root / "f.onnx"))


@case("bomb")
def _a_10_mb_name_in_an_error(root):
    name = "\n" + "n" * (10 << 20)
    m = model([h.make_node("Identity", [name], ["y"])])
    src = raw(root / "m.onnx", m)
    return Attack(["inspect", src], False, after=lambda r: _short(r.stderr))


def _short(err: bytes):
    assert len(err) < 4096, f"an error line of {len(err)} bytes"


@case("bomb")
def _sqrt2_behind_20000_identities(root):
    nodes = [h.make_node("Constant", [], ["s0"], value_float=SQRT2)]
    nodes += [h.make_node("Identity", [f"s{k}"], [f"s{k + 1}"]) for k in range(20000)]
    src = raw(root / "m.onnx", model(nodes + erf_chain("x", "s20000"), consts()))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",),
                  after=same_function(src, root / "f.onnx"))


@case("bomb")
def _external_data_100_gib_sparse(root):
    """64 KiB of weights 100 GiB into a sparse data file: copying it next to
    the output copies the data, not 100 GiB of holes."""
    src = ext(root / "m")
    data = (root / "m" / "w.bin").read_bytes()
    off = 100 << 30
    with open(root / "m" / "w.bin", "r+b") as f:
        f.truncate(0)
        f.seek(off)
        f.write(data)
    m = onnx.load(str(src), load_external_data=False)
    t = m.graph.initializer[0]
    info = {e.key: e.value for e in t.external_data}
    info["offset"] = str(off)
    del t.external_data[:]
    for k, v in info.items():
        t.external_data.add(key=k, value=v)
    raw(src, m)
    (root / "out").mkdir()
    out = root / "out" / "f.onnx"

    def sparse(_r):
        assert os.stat(root / "out" / "w.bin").st_blocks * 512 < 1 << 20
        runs_in_ort(out)
    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "out" / "w.bin"), after=sparse)


@case("bomb")
def _sparse_initializer_of_2_to_40_elements(root):
    sp = h.make_sparse_tensor(h.make_tensor("big", T.FLOAT, [1], [1.0]), h.make_tensor("i", T.INT64, [1], [0]),
                              [1 << 40])
    m = model(erf_chain("x", "s2"), consts("one", "half", "s2"))
    m.graph.sparse_initializer.append(sp)
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], None, max_rss_mib=800)


@case("bomb")
def _sqrt2_expanded_to_2_to_40_elements(root):
    nodes = [h.make_node("Constant", [], ["shape"], value_ints=[1 << 20, 1 << 20]),
             h.make_node("Expand", ["c", "shape"], ["s2"])]
    m = model(nodes + erf_chain("x", "s2"), consts() + [h.make_tensor("c", T.FLOAT, [], [SQRT2])])
    m.graph.output[0].type.tensor_type.shape.Clear()
    src = raw(root / "m.onnx", m)
    return Attack(["fuse", src, "-o", root / "f.onnx"], None, may_change=(root / "f.onnx",))


@case("bomb")
def _constant_of_shape_2_to_40(root):
    nodes = [h.make_node("Constant", [], ["shape"], value_ints=[1 << 40]),
             h.make_node("ConstantOfShape", ["shape"], ["half"], value=h.make_tensor("v", T.FLOAT, [1], [0.5]))]
    m = model(nodes + erf_chain("x", "s2"), consts("one", "s2"))
    m.graph.output[0].type.tensor_type.shape.Clear()
    src = raw(root / "m.onnx", m)
    return Attack(["inspect", src], None)


@case("bomb")
def _deep_add_chain_of_20000_nodes(root):
    nodes = [h.make_node("Add", [f"t{k}" if k else "x", "one"], [f"t{k + 1}"]) for k in range(20000)]
    nodes += erf_chain("t20000", "s2")
    src = raw(root / "m.onnx", model(nodes, consts("one", "half", "s2")))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",), timeout=120)


# --- const: read what the runtime reads ------------------------------------------------------


def _fuse_and_compare(root, m, valid=True, shape=(3, 4)):
    src = raw(root / "m.onnx", m)
    out = root / "f.onnx"
    return Attack(["fuse", src, "-o", out], valid, may_change=(out,), after=same_function(src, out, shape))


@case("const")
def _float_data_longer_than_dims(root):
    t = onnx.TensorProto(name="s2", data_type=T.FLOAT, dims=[])
    t.float_data.extend([SQRT2, 3.0])
    return _fuse_and_compare(root, model(erf_chain("x", "s2"), consts() + [t]), False)


@case("const")
def _raw_data_longer_than_dims(root):
    t = onnx.TensorProto(name="s2", data_type=T.FLOAT, dims=[], raw_data=np.array([SQRT2, 3], np.float32).tobytes())
    return _fuse_and_compare(root, model(erf_chain("x", "s2"), consts() + [t]), False)


@case("const")
def _raw_data_and_float_data_both(root):
    t = h.make_tensor("s2", T.FLOAT, [], [3.0])
    t.raw_data = np.float32(SQRT2).tobytes()
    return _fuse_and_compare(root, model(erf_chain("x", "s2"), consts() + [t]), False)


@case("const")
def _constant_with_value_twice(root):
    c = h.make_node("Constant", [], ["s2"], value=h.make_tensor("v", T.FLOAT, [], [3.0]))
    c.attribute.append(h.make_attribute("value", h.make_tensor("v", T.FLOAT, [], [SQRT2])))
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()), False)


@case("const")
def _sqrt2_as_a_sparse_constant(root):
    sp = h.make_sparse_tensor(h.make_tensor("v", T.FLOAT, [1], [SQRT2]), h.make_tensor("i", T.INT64, [1], [0]), [1])
    c = h.make_node("Constant", [], ["s2"], sparse_value=sp)
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()))


@case("const")
def _sqrt2_as_value_floats(root):
    c = h.make_node("Constant", [], ["s2"], value_floats=[SQRT2])
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()))


@case("const")
def _branch_initializer_shadows_the_outer_constant(root):
    """Inside the branch, s2 is the branch's own initializer (3.0), not the outer sqrt(2)."""
    branch = h.make_graph(erf_chain("x", "s2", "yb"), "b", [], [h.make_tensor_value_info("yb", T.FLOAT, [3, 4])],
                          [h.make_tensor("s2", T.FLOAT, [], [3.0])])
    nodes = [h.make_node("Constant", [], ["c"], value=h.make_tensor("c", T.BOOL, [], [True])),
             h.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    return _fuse_and_compare(root, model(nodes, consts("one", "half", "s2")), None)


@case("const")
def _constant_value_in_an_external_file(root):
    root.mkdir(exist_ok=True)
    (root / "c.bin").write_bytes(np.float32(SQRT2).tobytes())
    t = onnx.TensorProto(name="v", data_type=T.FLOAT, dims=[], data_location=T.EXTERNAL)
    for k, v in (("location", "c.bin"), ("offset", "0"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    c = h.make_node("Constant", [], ["s2"], value=t)
    a = _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()))
    return a


@case("const")
def _half_as_a_rank_5_ones_tensor(root):
    """[1,1,1,1,1] broadcasts y to rank 5: fusing it as a scalar would change the output shape."""
    m = model(erf_chain("x", "s2"), [h.make_tensor("half", T.FLOAT, [1, 1, 1, 1, 1], [0.5]),
                                     *consts("one", "s2")])
    m.graph.output[0].type.tensor_type.shape.Clear()
    return _fuse_and_compare(root, m, None)


@case("const")
def _half_broadcasting_to_a_new_leading_dim(root):
    m = model(erf_chain("x", "s2"), [h.make_tensor("half", T.FLOAT, [2, 1, 1], [0.5, 0.5]), *consts("one", "s2")])
    m.graph.output[0].type.tensor_type.shape.Clear()
    return _fuse_and_compare(root, m, None)


@case("const")
def _sqrt2_as_a_double_constant_in_a_float_graph(root):
    c = h.make_node("Constant", [], ["s2"], value=h.make_tensor("v", T.DOUBLE, [], [SQRT2]))
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()), False)


def _ref(attr: str, kind, decoy=None) -> onnx.AttributeProto:
    """An attribute that refers to the function's attribute ``c`` (and, for a
    decoy, also holds a value of its own: a reference holds no data)."""
    a = onnx.AttributeProto(name=attr, type=kind, ref_attr_name="c")
    if decoy is not None:
        a.MergeFrom(h.make_attribute(attr, decoy))
        a.ref_attr_name = "c"
    return a


def _calling(body, caller_value, attrs=("c",), opset=17):
    ops = [h.make_opsetid("", opset), h.make_opsetid("loc", 1)]
    f = h.make_function("loc", "F", ["x"], ["y"], body, ops, attributes=list(attrs))
    call = h.make_node("F", ["x"], ["y"], domain="loc")
    if caller_value is not None:
        call.attribute.append(h.make_attribute("c", caller_value))
    return model([call], functions=[f], domains=["loc"], opset=opset)


def _function_sqrt2(decoy):
    c = h.make_node("Constant", [], ["s2"])
    c.attribute.append(_ref("value_float", onnx.AttributeProto.FLOAT, decoy))
    consts = [h.make_node("Constant", [], [n], value_float=v) for n, v in (("one", 1.0), ("half", 0.5))]
    return [c] + consts + erf_chain("x", "s2")


@case("const")
def _function_constant_from_the_callers_attribute_with_a_decoy(root):
    """The runtime takes the caller's 3.0; the literal sqrt(2) beside the reference is a decoy."""
    return _fuse_and_compare(root, _calling(_function_sqrt2(SQRT2), 3.0), False)


@case("const")
def _function_constant_from_the_callers_attribute(root):
    return _fuse_and_compare(root, _calling(_function_sqrt2(None), SQRT2), True)


@case("const")
def _function_gelu_mode_from_the_callers_attribute_with_a_decoy(root):
    g = h.make_node("Gelu", ["x"], ["y"])
    g.attribute.append(_ref("approximate", onnx.AttributeProto.STRING, "tanh"))
    return _fuse_and_compare(root, _calling([g], None, opset=20), False)


@case("const")
def _attribute_reference_outside_any_function(root):
    c = h.make_node("Constant", [], ["s2"])
    c.attribute.append(_ref("value_float", onnx.AttributeProto.FLOAT, SQRT2))
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()), False)


# --- names: non-UTF-8 and over-long paths, strict output encodings ----------------------------

STRICT = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}


def _odd(root: Path, name: bytes) -> bytes:
    src = ext(root / "m")
    odd = os.fsencode(root / "m") + b"/" + name
    os.rename(src, odd)
    return odd


@case("names")
def _fuse_a_non_utf8_path_under_a_strict_locale(root):
    odd = _odd(root, b"\xff\xfe.onnx")
    out = os.fsencode(root / "m") + b"/\xfe-out.onnx"
    return Attack([b"fuse", odd, b"-o", out], True, env=STRICT, may_change=(os.fsdecode(out),))


@case("names")
def _inspect_json_of_a_non_utf8_path(root):
    odd = _odd(root, b"mod\xe9le.onnx")
    return Attack([b"inspect", odd, b"--json"], True, env=STRICT, after=lambda r: json.loads(r.stdout))


@case("names")
def _check_saving_to_a_non_utf8_path(root):
    a, b = fused(root)
    save = os.fsencode(root) + b"/\xff.npz"
    return Attack([b"check", os.fsencode(a), os.fsencode(b), b"--save-inputs", save], True, env=STRICT,
                  may_change=(os.fsdecode(save),))


@case("names")
def _missing_file_with_a_newline_in_its_name(root):
    return Attack(["inspect", str(root / "a\nb.onnx")], False, env=STRICT)


@case("names")
def _output_name_of_250_characters(root):
    src = ext(root / "m")
    out = root / ("o" * 245 + ".onnx")
    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "w.bin"))


@case("names")
def _output_name_of_300_characters(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", root / ("o" * 295 + ".onnx")], False)


@case("names")
def _output_path_of_5000_characters(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", str(root) + "/a" * 2500 + ".onnx"], False)


@case("names")
def _ascii_locale_and_a_utf8_path(root):
    odd = _odd(root, "modèle-µ.onnx".encode())
    return Attack([b"fuse", odd, b"-o", os.fsencode(root) + "/sortie-é.onnx".encode()], True,
                  env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii:strict"},
                  may_change=(os.fsdecode(os.fsencode(root) + "/sortie-é.onnx".encode()), root / "w.bin"))


@case("names")
def _non_utf8_bytes_in_a_node_name(root):
    m = model([h.make_node("Identity", ["x"], ["y"])])
    data = m.SerializeToString().replace(b"Identity", b"Ident\xffty")
    (root / "m.onnx").write_bytes(data)
    return Attack(["inspect", root / "m.onnx"], False, env=STRICT)


@case("names")
def _usage_error_is_one_line(root):
    src = ext(root / "m")
    return Attack(["fuse", src], False)


@case("names")
def _unknown_target_is_one_line(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", root / "f.onnx", "--target", "nope"], False)
