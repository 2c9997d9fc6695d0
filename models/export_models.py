"""Export tiny Hugging Face transformers to ONNX with both torch exporters.

Each architecture is built from a TINY config (1-2 layers, hidden 32, small
vocab / image) with a fixed seed, exported with the TorchScript exporter
(``dynamo=False``) and the dynamo exporter (``dynamo=True``) at opsets 14, 17
and 18, and written as one self-contained file (weights embedded, IR <= 10)
plus an entry in ``manifest.json``.

``expected_gelus`` in the manifest is counted from the torch model, not from
the graph: a forward pass with hooks on every GELU activation module (and a
torch-function mode for bare ``F.gelu`` calls) counts the GELU activations
the model computes, and the count must equal the number derived from the
config (layers x GELUs per layer + extras), or the architecture is rejected.
The graph is inspected separately (Erf/Tanh/Sigmoid/Gelu node counts) as a
cross-check.

Combinations an exporter cannot produce are recorded under ``skipped`` in the
manifest with the reason; nothing is dropped silently.

Usage (from the repository root)::

    python models/export_models.py              # everything (~15 min, 2 cores)
    python models/export_models.py --only bert gpt2   # re-export some; others kept
    python models/export_models.py --list
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from models.archs import Arch, archs  # noqa: E402 - run as a script from the repository root
from models.gelu_count import count_torch_gelus, graph_op_counts  # noqa: E402
from models.params import BIAS_STD, NORM_WEIGHT_STD, randomize_params  # noqa: E402

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
IR_VERSION = 10  # onnxruntime 1.31 loads <= 13; 10 is what torch's dynamo exporter writes
OPSETS = (14, 17, 18)
EXPORTERS = ("torchscript", "dynamo")
SEED = 0
# Export-faithfulness check: ORT on the exported file vs. the torch model.
EXPORT_ATOL = 1e-4


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------


class Positional(torch.nn.Module):
    """Calls an HF model with named inputs and returns its top-level tensors.

    Both exporters then see a plain positional signature and a flat tuple.
    """

    def __init__(self, model, names):
        super().__init__()
        self.model = model
        self.names = list(names)

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=False)
        if isinstance(out, torch.Tensor):
            return (out,)
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def make_inputs(spec: dict, seed: int = SEED) -> dict[str, np.ndarray]:
    """The test inputs a manifest entry describes (also used by the tests)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, s in spec.items():
        if s["dtype"].startswith("int"):
            lo, hi = s.get("range", [0, 2])
            out[name] = rng.integers(lo, hi, size=s["shape"], dtype=s["dtype"])
        else:
            out[name] = rng.standard_normal(s["shape"]).astype(s["dtype"])
    return out


def _strip_metadata(model: onnx.ModelProto) -> None:
    """Drop per-node stack traces / doc strings (most of a dynamo file's size)."""

    def strip(nodes):
        for n in nodes:
            n.doc_string = ""
            del n.metadata_props[:]
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    strip(a.g.node)
                for g in a.graphs:
                    strip(g.node)

    strip(model.graph.node)
    for f in model.functions:
        strip(f.node)
    del model.graph.value_info[:]  # shape annotations from the exporter; ORT re-infers


@contextlib.contextmanager
def _quiet():
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        # onnxscript reports a failed version conversion only through logging
        # (lastResort handler -> the redirected stderr), so keep logging on.
        warnings.simplefilter("ignore")
        yield buf


def _reason(e: BaseException, limit: int = 300) -> str:
    """One line: torch.onnx buries the cause under an 'Exception summary' header."""
    text = str(e)
    lines = [ln.strip() for ln in text.split("## Exception summary", 1)[-1].splitlines() if ln.strip()]
    return f"{type(e).__name__}: {(lines[0] if lines else '')[:limit]}"


def _export(wrapper, args, names, outputs, axes, exporter, opset) -> tuple[onnx.ModelProto, list[str]]:
    notes = []
    with tempfile.TemporaryDirectory() as td, _quiet() as log:
        path = os.path.join(td, "m.onnx")
        if exporter == "torchscript":
            torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=opset, input_names=names,
                              output_names=outputs, dynamic_axes=axes, do_constant_folding=True)
            model = onnx.load(path)
        else:
            try:
                dims: dict[str, object] = {}
                shapes = tuple({k: dims.setdefault(v, torch.export.Dim(v)) for k, v in axes[n].items()} for n in names)
                prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, input_names=names,
                                         output_names=outputs, dynamic_shapes=(shapes,), optimize=True)
            except Exception as e:  # noqa: BLE001 - record and retry static
                notes.append(f"dynamic shapes failed ({_reason(e, 200)}), exported with static shapes")
                prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, input_names=names,
                                         output_names=outputs, optimize=True)
            model = prog.model_proto
        text = log.getvalue()
    if "Failed to convert the model to the target version" in text:
        reason = next((ln for ln in text.splitlines() if "Assertion" in ln), "")
        notes.append(f"onnx version converter failed: {reason.split('Assertion', 1)[-1].strip()[:200]}")
    _strip_metadata(model)
    model.ir_version = min(model.ir_version, IR_VERSION)
    return model, notes


def _dyn_axes(model: onnx.ModelProto, name: str) -> dict[str, str]:
    vi = next(i for i in model.graph.input if i.name == name)
    return {str(k): d.dim_param for k, d in enumerate(vi.type.tensor_type.shape.dim) if d.dim_param}


def _ort_run(model: onnx.ModelProto, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def export_arch(arch: Arch, out_dir: Path, opsets=OPSETS, exporters=EXPORTERS):
    """Export one architecture; returns (entries, skipped)."""
    names = list(arch.inputs)

    def fresh():
        # Same seed, same weights. A new instance per export: a TorchScript
        # trace can leave state behind that breaks a later torch.export
        # (Swin: data-dependent guard), so exports must not share a model.
        torch.manual_seed(SEED)
        with _quiet():
            model = arch.build().eval()
        randomize_params(model, SEED)  # HF's zero biases / (1, 0) norms would hide a lost bias
        return model, Positional(model, names).eval()

    model, wrapper = fresh()
    feeds = make_inputs(arch.inputs)
    tins = {k: torch.from_numpy(v) for k, v in feeds.items()}
    args = tuple(tins[n] for n in names)

    forms, others = count_torch_gelus(model, tins, arch.extra_fns())
    forms = dict(sorted((k, v) for k, v in forms.items() if v))
    if forms != arch.expected_forms:
        raise RuntimeError(f"{arch.name}: hooks counted {forms}, construction says {arch.expected_forms}")
    with torch.no_grad():
        ref = [t.numpy() for t in wrapper(*args)]
    outputs = ["output" if len(ref) == 1 else f"output_{i}" for i in range(len(ref))]
    axes = {n: {int(k): v for k, v in s["axes"].items()} for n, s in arch.inputs.items()}

    entries, skipped = [], []
    for exporter in exporters:
        for opset in opsets:
            combo = {"name": arch.name, "exporter": exporter, "opset_requested": opset}
            try:
                with torch.no_grad():
                    onx, notes = _export(fresh()[1], args, names, outputs, axes, exporter, opset)
            except Exception as e:  # noqa: BLE001 - recorded in the manifest
                skipped.append({**combo, "reason": _reason(e)})
                continue
            opset_got = next(o.version for o in onx.opset_import if o.domain in ("", "ai.onnx"))
            if opset_got != opset:
                # The dynamo exporter builds opset 18 and down-converts; when that
                # fails it keeps 18, a copy of the opset-18 export.
                reason = f"exporter produced opset {opset_got} instead of {opset}"
                reason += f" ({'; '.join(notes)})" if notes else ""
                skipped.append({**combo, "reason": reason + "; not kept (the native export covers it)"})
                continue
            blob = onx.SerializeToString()
            digest = hashlib.sha256(blob).hexdigest()
            try:
                onnx.checker.check_model(onx, full_check=True)
                got = _ort_run(onx, feeds)
            except Exception as e:  # noqa: BLE001 - an invalid export is recorded, not kept
                skipped.append({**combo, "reason": f"export is invalid ({_reason(e, 200)})"
                                + (f"; {'; '.join(notes)}" if notes else "")})
                continue
            diff = max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(got, ref))
            if not diff <= EXPORT_ATOL:
                skipped.append({**combo, "reason": f"export is not faithful: ORT vs torch max |diff| {diff:.3g}"})
                continue
            fname = f"{arch.name}_{exporter}_op{opset_got}.onnx"
            tmp = out_dir / (fname + ".tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, out_dir / fname)
            n_graph = graph_op_counts(onx)
            n_gelu = sum(forms.values())
            already = sum(v for k, v in n_graph.items() if k.endswith("Gelu"))
            entries.append({
                "file": fname,
                "name": arch.name,
                "architecture": arch.architecture,
                "hf_class": arch.hf_class,
                "activation": arch.activation,
                "kind": arch.kind,
                "exporter": exporter,
                "opset_requested": opset,
                "opset": opset_got,
                "ir_version": onx.ir_version,
                # Test shapes, and the axes the file really left dynamic.
                "inputs": {n: {"dtype": s["dtype"], "shape": s["shape"], "dynamic_axes": _dyn_axes(onx, n),
                               **({"range": s["range"]} if "range" in s else {})}
                           for n, s in arch.inputs.items()},
                "outputs": outputs,
                "expected_gelus": n_gelu,
                "expected_forms": forms,
                # GELUs the exporter already emitted as one op are not fusions.
                # Per target. ONNX has no standard op for x*sigmoid(a*x), so
                # --target standard leaves QuickGELUs as they are.
                "expected_fusions": {
                    "custom": n_gelu - already,
                    "standard": n_gelu - already - forms.get("sigmoid", 0),
                    "ort": n_gelu - already,
                },
                "expected_gelus_standard": n_gelu - already - forms.get("sigmoid", 0),
                "graph_ops": n_graph,
                "torch_other_calls": dict(sorted(others.items())),
                "export_max_abs_diff": diff,
                "size_bytes": len(blob),
                "sha256": digest,
                "notes": "; ".join(x for x in [arch.notes, *notes] if x),
            })
    return entries, skipped


def _load_manifest():
    if MANIFEST.exists():
        return json.loads(MANIFEST.read_text())
    return {"models": [], "skipped": []}


README = HERE / "README.md"
TABLE_BEGIN, TABLE_END = "<!-- table:begin (written by export_models.py) -->", "<!-- table:end -->"


def readme_table(manifest: dict) -> str:
    """The README's file table and skip list, generated from the manifest."""
    rows = ["| file | architecture | HF class | activation | exporter | opset | GELUs (forms) | "
            "custom / standard / ort fusions | graph Erf/Tanh/Sigmoid | KB |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for e in manifest["models"]:
        forms = ", ".join(f"{v} {k}" for k, v in e["expected_forms"].items()) or "none"
        g = e["graph_ops"]
        fx = e["expected_fusions"]
        rows.append(f"| `{e['file']}` | {e['architecture']} | {e['hf_class']} | `{e['activation']}` | {e['exporter']} "
                    f"| {e['opset']} | {e['expected_gelus']} ({forms}) | {fx['custom']} / {fx['standard']} / {fx['ort']} "
                    f"| {g.get('Erf', 0)}/{g.get('Tanh', 0)}/{g.get('Sigmoid', 0)} | {e['size_bytes'] // 1024} |")
    total = sum(e["size_bytes"] for e in manifest["models"])
    rows.append("")
    rows.append(f"{len(manifest['models'])} files, {len({e['name'] for e in manifest['models']})} architectures / "
                f"variants, {total / 1e6:.1f} MB.")
    rows.append("")
    rows.append("Combinations not kept, and why:")
    rows.append("")
    for x in manifest["skipped"]:
        rows.append(f"- {x['name']} / {x['exporter']} / opset {x['opset_requested']}: {x['reason']}")
    return "\n".join(rows)


def _write_readme(manifest: dict) -> None:
    if not README.exists():
        return
    text = README.read_text()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        return
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    tmp = README.with_suffix(".md.tmp")
    tmp.write_text(f"{head}{TABLE_BEGIN}\n{readme_table(manifest)}\n{TABLE_END}{tail}")
    os.replace(tmp, README)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="export only these architectures (others stay)")
    ap.add_argument("--list", action="store_true", help="list architecture names and exit")
    ap.add_argument("--readme", action="store_true", help="only rewrite README.md's table from manifest.json")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: models/)")
    a = ap.parse_args(argv)
    all_archs = archs()
    if a.readme:
        _write_readme(_load_manifest())
        return 0
    if a.list:
        for x in all_archs:
            print(f"{x.name:24s} {x.hf_class:20s} {x.activation:18s} {x.kind}")
        return 0
    names = {x.name for x in all_archs}
    if a.only and not set(a.only) <= names:
        print(f"error: unknown architecture(s): {sorted(set(a.only) - names)}", file=sys.stderr)
        return 2
    chosen = [x for x in all_archs if not a.only or x.name in a.only]
    a.out.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest() if a.only else {"models": [], "skipped": []}
    redo = {x.name for x in chosen}
    models = [e for e in manifest["models"] if e["name"] not in redo]
    skipped = [e for e in manifest["skipped"] if e["name"] not in redo]
    failed = 0
    for arch in chosen:
        try:
            e, s = export_arch(arch, a.out)
        except Exception as exc:  # noqa: BLE001 - a whole architecture failed: record it
            traceback.print_exc()
            e, s = [], [{"name": arch.name, "exporter": "*", "opset_requested": None,
                         "reason": _reason(exc)}]
            failed += 1
        models += e
        skipped += s
        print(f"{arch.name:22s} kept {len(e)}  skipped {len(s)}" + "".join(f"\n    skip {x['exporter']} op{x['opset_requested']}: {x['reason']}" for x in s), flush=True)
    order = {x.name: i for i, x in enumerate(all_archs)}
    key = lambda e: (order.get(e["name"], 1e9), e["exporter"], e.get("opset_requested") or 0)  # noqa: E731
    manifest = {
        "generator": "models/export_models.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "onnx": onnx.__version__, "onnxscript": __import__("onnxscript").__version__},
        "seed": SEED,
        "params": f"models/params.py randomize_params(seed {SEED}): every bias N(0, {BIAS_STD}^2), every norm "
                  f"weight and layer scale 1 + N(0, {NORM_WEIGHT_STD}^2); matrices and embeddings as "
                  "transformers initialises them",
        "test_input_seed": SEED,
        "models": sorted(models, key=key),
        "skipped": sorted(skipped, key=key),
    }
    tmp = MANIFEST.with_suffix(".json.tmp") if a.out == HERE else a.out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, tmp.with_suffix(""))
    if a.out == HERE:
        _write_readme(manifest)
    total = sum(e["size_bytes"] for e in manifest["models"])
    print(f"{len(manifest['models'])} files, {total / 1e6:.1f} MB; {len(manifest['skipped'])} combos skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
