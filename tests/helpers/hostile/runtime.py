"""The hostile suite, groups race (concurrent writers into one
folder), native (GELU ops ONNX Runtime refuses as invalid), quiet (ONNX
Runtime's lines with HOME not writable), home (files written outside the
output), bytes (strings and paths that are not UTF-8) and domain (functions
a model defines in our domain). docs/safety.md and docs/cli.md say what
each promises."""
from __future__ import annotations

import os
import shutil

from onnx import TensorProto as T
from onnx import helper as h

from helpers.hostile.judge import Attack
from helpers.hostile.cases import IO, case, consts, erf_chain, ext, model, plain, raw, register, same_function
from helpers.model_helpers import EXTERNAL_H, gelu_model, unknown_field_models

MS = "com.microsoft"
STRICT = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}


# --- race: writers at the same time into one folder ------------------------------------------------

def _race(srcs, outs) -> str:
    """Python: one `gelu-onnx fuse` per (src, out), started together; exit 0
    when every run is 0 or 2 with one line, else 4 (the judge's failure)."""
    return f"""
import subprocess, sys
runs = [subprocess.Popen([sys.executable, "-m", "gelu_onnx", "fuse", s, "-o", o], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True) for s, o in zip({list(map(str, srcs))}, {list(map(str, outs))})]
got = [(p.wait(), p.stderr.read()) for p in runs]
bad = [g for g in got if g[0] not in (0, 2) or (g[0] == 2) != (g[1].count(chr(10)) == 1) or (g[0] == 0 and g[1])]
if bad or not any(c == 0 for c, _ in got):
    print("runs", got, file=sys.stderr)
    sys.exit(4)
"""


def _each_written_computes_its_own(pairs):
    def check(r):
        for src, out in pairs:
            if os.path.exists(out):
                same_function(src, out, (3, EXTERNAL_H))(r)
    return check


@case("race")
def _two_fuses_with_other_weights_in_w_bin_into_one_folder(root):
    """The report: both exited 0 and one output read the other's weights."""
    srcs = [ext(root / "a", seed=0), ext(root / "b", seed=1)]
    (root / "out").mkdir()
    outs = [root / "out" / "a.onnx", root / "out" / "b.onnx"]
    return Attack([], True, python=_race(srcs, outs), may_change=(*outs, root / "out" / "w.bin"),
                  after=_each_written_computes_its_own(zip(srcs, outs)))


@case("race")
def _four_fuses_of_one_model_into_one_folder(root):
    """The same weights under one name: every run writes, sharing w.bin."""
    src = ext(root / "a")
    (root / "out").mkdir()
    outs = [root / "out" / f"{k}.onnx" for k in range(4)]

    def every_one(r):
        assert all(o.exists() for o in outs)
        _each_written_computes_its_own([(src, o) for o in outs])(r)
    return Attack([], True, python=_race([src] * 4, outs), may_change=(*outs, root / "out" / "w.bin"),
                  after=every_one)


# --- native: a GELU op ONNX Runtime refuses is never made valid -------------------------------------

def _invalid_native(op: str, n_in: int, **attrs):
    def build(root):
        ins = ["x", "b", "b"][:n_in]
        inits = [h.make_tensor("b", T.FLOAT, [4], [0.5, -1.0, 2.0, 0.25])]
        m = model([h.make_node(op, ins, ["y"], domain=MS, name="g", **attrs)], inits, domains=[MS])
        src = raw(root / "m.onnx", m)
        out = root / "f.onnx"

        def still_refused(r):
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.log_severity_level = 4
            for p in (src, out):  # refused as the input was: nothing dropped into a valid op
                try:
                    ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
                except Exception:  # noqa: BLE001
                    continue
                raise AssertionError(f"{p.name} loads in ONNX Runtime")
            assert b"native-arity" in r.stdout
        return Attack(["fuse", src, "-o", out, "--target", "ort"], True, may_change=(out,), after=still_refused)
    return build


for _name, _op, _n, _attrs in (("gelu_with_2_inputs", "Gelu", 2, {}), ("biasgelu_with_3_inputs", "BiasGelu", 3, {}),
                               ("fastgelu_with_3_inputs", "FastGelu", 3, {}), ("quickgelu_with_2_inputs", "QuickGelu", 2, {}),
                               ("gelu_with_an_approximate_attribute", "Gelu", 1, {"approximate": "tanh"})):
    register(f"native/{_name}", _invalid_native(_op, _n, **_attrs))


# --- quiet: our one line is the only line, whatever HOME is -------------------------------------------

def _home_a_file(root) -> dict:
    (root / "home").write_text("")  # not a folder: even root cannot write in it
    return {"HOME": str(root / "home"), "XDG_CACHE_HOME": "", "ORT_DISABLE_TELEMETRY": ""}


@case("quiet")
def _fuse_check_and_info_with_home_unwritable(root):
    src = ext(root / "m")
    out = root / "m" / "f.onnx"
    script = f"""
import subprocess, sys
for args in (["info"], ["fuse", {str(src)!r}, "-o", {str(out)!r}], ["check", {str(src)!r}, {str(out)!r}]):
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", *args], capture_output=True, text=True)
    if r.returncode or r.stderr:
        print(args[0], r.returncode, repr(r.stderr[-300:]), file=sys.stderr)
        sys.exit(4)
"""
    return Attack([], True, python=script, env=_home_a_file(root), may_change=(out,))


@case("quiet")
def _check_where_the_original_fails_inside_a_run_with_home_unwritable(root):
    import numpy as np

    nodes = [h.make_node("Gather", ["E", "ids"], ["x"])] + erf_chain("x", "s2")
    inits = consts("one", "half", "s2") + [h.make_tensor("E", T.FLOAT, [5, 4], np.arange(20.0) / 7 - 1)]
    m = model(nodes, inits, inputs=[h.make_tensor_value_info("ids", T.INT64, [3])])
    src = raw(root / "m.onnx", m)
    np.savez(root / "ids.npz", ids=np.array([0, 4, 77], np.int64))  # 77: past the table
    return Attack(["check", src, src, "--inputs", root / "ids.npz"], False, env=_home_a_file(root))


# --- home: nothing undocumented outside the output ---------------------------------------------------------

def _fresh_home(root, cache: str) -> dict:
    (root / "home").mkdir()
    (root / "tmp").mkdir()
    return {"HOME": str(root / "home"), "TMPDIR": str(root / "tmp"), "XDG_CACHE_HOME": "", "GELU_ONNX_CACHE": cache,
            "ORT_DISABLE_TELEMETRY": ""}  # as a user's shell has it (the test process set it)


@case("home")
def _fuse_with_the_cache_off_writes_only_its_output(root):
    src = ext(root / "m")
    out = root / "f.onnx"
    return Attack(["fuse", src, "-o", out], True, env=_fresh_home(root, "off"), may_change=(out, root / "w.bin"))


@case("home")
def _fuse_writes_only_its_output_and_the_documented_cache(root):
    src = ext(root / "m")
    out = root / "f.onnx"
    cache = root / "home" / ".cache" / "gelu-onnx"
    return Attack(["fuse", src, "-o", out], True, env=_fresh_home(root, ""),
                  may_change=(out, root / "w.bin", cache.parent, cache, cache / "ort-max-ir.json"))


@case("home")
def _check_and_bench_write_nothing_outside(root):
    src = plain(root / "m")
    script = f"""
import subprocess, sys
for args in (["check", {str(src)!r}, {str(src)!r}], ["bench", {str(src)!r}, "--repeats", "2", "--warmup", "1",
                                                       "--opt-levels", "basic"]):
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", *args], capture_output=True, text=True)
    if r.returncode or r.stderr:
        print(args[0], r.returncode, repr(r.stderr[-300:]), file=sys.stderr)
        sys.exit(4)
"""
    return Attack([], True, python=script, env=_fresh_home(root, "off"))


# --- bytes: strings and paths that are not UTF-8 ---------------------------------------------------------

@case("bytes")
def _graph_name_doc_string_metadata_and_dim_param_not_utf8(root):
    m = gelu_model(dims=("batchZZ", 8))
    m.graph.name, m.doc_string, m.graph.doc_string, m.producer_name = "gZZ", "docZZ", "gdocZZ", "prodZZ"
    e = m.metadata_props.add()
    e.key, e.value = "keyZZ", "valueZZ"
    (root / "m.onnx").write_bytes(m.SerializeToString().replace(b"ZZ", b"\xff\xfe"))
    out = root / "f.onnx"
    return Attack(["fuse", root / "m.onnx", "-o", out, "--json"], True, env=STRICT, may_change=(out,),
                  after=lambda r: __import__("json").loads(r.stdout))


@case("bytes")
def _fields_of_another_wire_type_and_groups_in_every_message(root):
    """Unknown fields to protobuf (model_helpers.unknown_field_models): a valid model, fused."""
    src, out = root / "m.onnx", root / "f.onnx"
    src.write_bytes(unknown_field_models()["every message"])
    return Attack(["fuse", src, "-o", out], True, may_change=(out,), after=same_function(src, out, (3, 8)))


@case("bytes")
def _inspect_json_of_a_model_with_a_non_utf8_dim_param(root):
    m = gelu_model(dims=("seqZZ", 8))
    (root / "m.onnx").write_bytes(m.SerializeToString().replace(b"ZZ", b"\xfe\xff"))
    return Attack(["inspect", root / "m.onnx", "--json"], True, env=STRICT,
                  after=lambda r: __import__("json").loads(r.stdout))


@case("bytes")
def _fuse_a_plain_model_under_a_0xff_path(root):
    """The input check reads this one from its file: onnx took str paths only (exit 4)."""
    folder = os.fsencode(root) + b"/\xff"
    os.mkdir(folder)
    with open(folder + b"/m\xff.onnx", "wb") as f:
        f.write(gelu_model().SerializeToString())
    out = folder + b"/o\xff.onnx"
    return Attack([b"fuse", folder + b"/m\xff.onnx", b"-o", out], True, env=STRICT, may_change=(os.fsdecode(out),))


@case("bytes")
def _check_external_data_models_under_a_0xff_folder(root):
    src = ext(root / "m")
    folder = os.fsencode(root) + b"/d\xff"
    os.mkdir(folder)
    shutil.copy(src, folder + b"/m.onnx")
    shutil.copy(root / "m" / "w.bin", folder + b"/w.bin")
    import gelu_onnx

    gelu_onnx.fuse_file(folder + b"/m.onnx", folder + b"/f.onnx")
    return Attack([b"check", folder + b"/m.onnx", folder + b"/f.onnx"], True, env=STRICT)


# --- domain: functions a model defines in ai.gelu_onnx -------------------------------------------------------

def _own_gelu_erf(root):
    from gelu_onnx import contract as C

    body = h.make_function(C.DOMAIN, "GeluErf", ["X"], ["Y"], [h.make_node("Relu", ["X"], ["Y"])],
                           [h.make_opsetid("", 17)])
    g = h.make_graph([h.make_node("GeluErf", ["x"], ["y"], domain=C.DOMAIN)], "g", *IO)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(C.DOMAIN, 1)], functions=[body],
                     ir_version=10)
    return raw(root / "m.onnx", m)


@case("domain")
def _fuse_a_model_whose_gelu_erf_function_is_its_own(root):
    src = _own_gelu_erf(root)
    return Attack(["fuse", src, "-o", root / "f.onnx", "--target", "custom"], False)


@case("domain")
def _inspect_a_model_whose_gelu_erf_function_is_its_own(root):
    return Attack(["inspect", _own_gelu_erf(root), "--json"], False)


@case("domain")
def _check_a_model_whose_gelu_erf_function_is_its_own(root):
    # with our library registered, ONNX Runtime would run our kernel for its GeluErf: no verdict on that
    src = _own_gelu_erf(root)
    return Attack(["check", src, src], False)


@case("domain")
def _a_model_we_fused_is_fused_again(root):
    src = plain(root / "m")
    import gelu_onnx

    gelu_onnx.fuse_file(src, root / "m" / "f.onnx")
    out = root / "m" / "g.onnx"
    return Attack(["fuse", root / "m" / "f.onnx", "-o", out, "--target", "standard"], True, may_change=(out,),
                  after=same_function(src, out, (3, 8)))
