"""Generate the models the fuse-speed benchmark runs on (deterministic, random weights).

  python benchmarks/make_models.py [--out /tmp/gelu-bench] [--only bert-base,bert-large,ext,synth]
                                   [--ext-gb 4.5] [--ext-files 2] [--synth 1000,10000,100000]

Writes, under --out (never inside the repository):
  bert-base.onnx     12 layers, hidden 768,  FFN 3072, vocab 30522, one file (~440 MB)
  bert-large.onnx    24 layers, hidden 1024, FFN 4096, vocab 30522, one file (~1.34 GB)
  ext/ext.onnx       hidden 4096, FFN 16384, vocab 32000, as many layers as --ext-gb needs;
                     weights in --ext-files data files next to it (relative locations)
  synth-N.onnx       N GELUs in a chain, each behind a bias Add, cycling through five spellings
  ifs-N.onnx         N If nodes in a chain (--only ifs, --ifs N), each with two one-node bodies
                     (then: Add, else: Mul of its own random non-zero constant): validation per body
  deep-{gpt2,bert}-L-{torchscript,dynamo}.onnx
                     realistic node-heavy exports (--only deep): Hugging Face GPT-2 / BERT with
                     --deep-layers layers at hidden 64, exported by torch (needs torch + transformers)

The BERT graphs are runnable encoders (opset 17) whose GELU is spelled as the
TorchScript exporter writes it: MatMul -> Add(bias) -> Div(sqrt 2) -> Erf ->
Add(1) -> Mul(x) -> Mul(0.5). Weights are N(0, 0.02) float32 from a seeded
numpy generator, so the files are the same on every run.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# torch's dynamo exporter builds opset 18; asked for 17 it converts down and
# leaves Split-18's num_outputs on the GPT-2, which onnx.checker refuses
# (gelu-onnx then exits 2: bad input). Its own opset, unconverted.
DYNAMO_OPSET = 18
IR_VERSION = 10  # onnxruntime 1.31 loads <= 13; onnx 1.23 writes 14 by default
BERT_CONFIGS = {
    "bert-base": dict(layers=12, hidden=768, ffn=3072, heads=12, vocab=30522),
    "bert-large": dict(layers=24, hidden=1024, ffn=4096, heads=16, vocab=30522),
}
EXT_CONFIG = dict(hidden=4096, ffn=16384, heads=32, vocab=32000)
MAX_POS = 512


class _Weights:
    """Seeded N(0, 0.02) weights, either embedded (raw_data) or streamed to data files."""

    def __init__(self, seed: int, data_dir: str | None = None, n_files: int = 1, prefix: str = "ext"):
        self.rng = np.random.default_rng(seed)
        self.data_dir, self.inits = data_dir, []
        self.files = []
        if data_dir is not None:
            self.files = [[f"{prefix}.{k}.data", open(os.path.join(data_dir, f"{prefix}.{k}.data"), "wb"), 0]
                          for k in range(n_files)]

    def add(self, name: str, shape, scale: float = 0.02) -> str:
        if self.data_dir is None:
            a = (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))
            self.inits.append(numpy_helper.from_array(a, name))
            return name
        entry = min(self.files, key=lambda e: e[2])  # the least filled data file
        loc, f, off = entry
        pad = (-off) % 4096  # aligned like onnx and gelu_onnx.onnxio write them
        f.write(b"\0" * pad)
        off += pad
        n = math.prod(shape)
        left = n
        while left:  # stream in 64 MB chunks: never the whole tensor in memory
            k = min(left, 1 << 24)
            f.write((self.rng.standard_normal(k, dtype=np.float32) * np.float32(scale)).tobytes())
            left -= k
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", loc), ("offset", str(off)), ("length", str(4 * n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        entry[2] = off + 4 * n
        self.inits.append(t)
        return name

    def const(self, name: str, value, dtype=np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def close(self):
        for _, f, _ in self.files:
            f.close()


def bert(cfg: dict, seed: int = 0, data_dir: str | None = None, n_files: int = 1) -> onnx.ModelProto:
    """A BERT encoder with cfg's sizes; weights embedded, or external in data_dir."""
    L, H, F, heads, V = cfg["layers"], cfg["hidden"], cfg["ffn"], cfg["heads"], cfg["vocab"]
    dh = H // heads
    w = _Weights(seed, data_dir, n_files)
    nodes = []
    k = [0]

    def node(op, ins, n_out=1, **attrs):
        k[0] += 1
        outs = [f"/{op}_{k[0]}_output_{j}" for j in range(n_out)]
        nodes.append(helper.make_node(op, ins, outs, name=f"/{op}_{k[0]}", **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(x, name, n_in, n_out):
        y = node("MatMul", [x, w.add(f"{name}.weight", (n_in, n_out))])
        return node("Add", [w.add(f"{name}.bias", (n_out,)), y])  # TorchScript puts the bias first

    def layer_norm(x, name):
        g = w.const(f"{name}.weight", np.ones(H))
        b = w.const(f"{name}.bias", np.zeros(H))
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-12)

    # embeddings: word + position + token type
    word = node("Gather", [w.add("embeddings.word_embeddings.weight", (V, H)), "input_ids"])
    shape = node("Shape", ["input_ids"])
    seq = node("Gather", [shape, w.const("seq_axis", 1, np.int64)], axis=0)
    pos_ids = node("Range", [w.const("zero_i64", 0, np.int64), seq, w.const("one_i64", 1, np.int64)])
    pos = node("Gather", [w.add("embeddings.position_embeddings.weight", (MAX_POS, H)), pos_ids])
    typ = node("Gather", [w.add("embeddings.token_type_embeddings.weight", (2, H)), "token_type_ids"])
    h = layer_norm(node("Add", [node("Add", [word, pos]), typ]), "embeddings.LayerNorm")
    # additive attention mask [B, 1, 1, S]
    m = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    m = node("Mul", [node("Sub", [w.const("one_f", 1.0), m]), w.const("neg_big", -10000.0)])
    mask = node("Unsqueeze", [m, w.const("mask_axes", [1, 2], np.int64)])
    split = w.const("split_heads", [0, 0, heads, dh], np.int64)
    merge = w.const("merge_heads", [0, 0, H], np.int64)
    scale = w.const("attn_scale", math.sqrt(dh))
    for i in range(L):
        p = f"encoder.layer.{i}"
        q, kk, v = (node("Reshape", [linear(h, f"{p}.attention.self.{n}", H, H), split]) for n in ("query", "key", "value"))
        q = node("Transpose", [q], perm=[0, 2, 1, 3])
        kk = node("Transpose", [kk], perm=[0, 2, 3, 1])
        v = node("Transpose", [v], perm=[0, 2, 1, 3])
        s = node("Add", [node("Div", [node("MatMul", [q, kk]), scale]), mask])
        ctx = node("MatMul", [node("Softmax", [s], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        a = layer_norm(node("Add", [linear(ctx, f"{p}.attention.output.dense", H, H), h]), f"{p}.attention.output.LayerNorm")
        # the FFN with TorchScript's GELU spelling
        x = linear(a, f"{p}.intermediate.dense", H, F)
        g = node("Div", [x, w.const(f"{p}.gelu.sqrt2", 1.4142135381698608)])
        g = node("Add", [node("Erf", [g]), w.const(f"{p}.gelu.one", 1.0)])
        g = node("Mul", [node("Mul", [x, g]), w.const(f"{p}.gelu.half", 0.5)])
        h = layer_norm(node("Add", [linear(g, f"{p}.output.dense", F, H), a]), f"{p}.output.LayerNorm")
    nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"], name="/output"))
    w.close()
    ints = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
    g = helper.make_graph(nodes, "bert", [ints("input_ids"), ints("token_type_ids"), ints("attention_mask")],
                          [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", H])],
                          w.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gelu-onnx-bench")
    model.ir_version = IR_VERSION
    return model


def _gelu(kind: int, x: str, c: dict, node) -> str:
    """One GELU on x in one of five spellings (constants shared, as exporters dedup them)."""
    if kind == 0:  # TorchScript erf
        e = node("Erf", [node("Div", [x, c["sqrt2"]])])
        return node("Mul", [node("Mul", [x, node("Add", [e, c["one"]])]), c["half"]])
    if kind == 1:  # erf with Mul by 1/sqrt2, 0.5 first
        e = node("Erf", [node("Mul", [x, c["inv_sqrt2"]])])
        return node("Mul", [node("Mul", [c["half"], x]), node("Add", [c["one"], e])])
    if kind == 2:  # tanh, Pow
        inner = node("Add", [x, node("Mul", [c["k"], node("Pow", [x, c["three"]])])])
        t = node("Tanh", [node("Mul", [c["s2pi"], inner])])
        return node("Mul", [node("Mul", [c["half"], x]), node("Add", [c["one"], t])])
    if kind == 3:  # tanh, factored x*(1 + k x^2) (gelu_fast / Megatron)
        inner = node("Mul", [x, node("Add", [c["one"], node("Mul", [c["k"], node("Mul", [x, x])])])])
        t = node("Tanh", [node("Mul", [inner, c["s2pi"]])])
        return node("Mul", [x, node("Mul", [c["half"], node("Add", [t, c["one"]])])])
    # QuickGELU
    return node("Mul", [x, node("Sigmoid", [node("Mul", [c["alpha"], x])])])


def synthetic(n_gelu: int, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x -> [Add(bias_i) -> GELU_i] * n_gelu: n_gelu GELUs, each with its own bias initializer."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (
        ("sqrt2", math.sqrt(2)), ("inv_sqrt2", 1 / math.sqrt(2)), ("one", 1.0), ("half", 0.5),
        ("three", 3.0), ("k", 0.044715), ("s2pi", math.sqrt(2 / math.pi)), ("alpha", 1.702))]
    c = {t.name: t.name for t in inits}
    nodes = []
    k = [0]

    def node(op, ins):
        k[0] += 1
        out = f"t{k[0]}"
        nodes.append(helper.make_node(op, ins, [out], name=f"n{k[0]}"))
        return out

    x = "x"
    biases = rng.standard_normal((n_gelu, width), dtype=np.float32) * np.float32(0.1)
    for i in range(n_gelu):
        b = numpy_helper.from_array(biases[i], f"bias{i}")
        inits.append(b)
        x = _gelu(i % 5, node("Add", [x, b.name]), c, node)
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", width])
    g = helper.make_graph(nodes, f"synth{n_gelu}", [vi("x")], [vi("y")], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gelu-onnx-bench")
    model.ir_version = IR_VERSION
    return model


def ext_layers(gb: float) -> int:
    H, F, V = EXT_CONFIG["hidden"], EXT_CONFIG["ffn"], EXT_CONFIG["vocab"]
    per_layer = 4 * (4 * H * H + 2 * H * F + 4 * H + F + F)
    fixed = 4 * (V + MAX_POS + 2) * H
    return max(1, math.ceil((gb * 1e9 - fixed) / per_layer))


def deep_export(arch: str, layers: int, exporter: str, path: str) -> None:
    """A Hugging Face GPT-2 / BERT of ``layers`` layers at hidden 64 (2 heads,
    FFN 256, vocab 64, eager attention), random non-zero weights, exported at
    opset 17 by torch's TorchScript exporter or opset 18 by its dynamo
    exporter (DYNAMO_OPSET): 10k-60k nodes, the node-heavy case a fuse pass
    meets in practice."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=64, attn_implementation="eager")
    if arch == "gpt2":
        cfg = tf.GPT2Config(n_layer=layers, n_embd=64, n_head=2, n_positions=64, **common)
        net = tf.GPT2Model(cfg)
    else:
        cfg = tf.BertConfig(num_hidden_layers=layers, hidden_size=64, num_attention_heads=2,
                            intermediate_size=256, max_position_embeddings=64, **common)
        net = tf.BertModel(cfg)
    with torch.no_grad():
        for p in net.parameters():  # non-zero biases and LayerNorm parameters
            p.add_(torch.randn_like(p) * 0.02)
    net.eval()

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state

    ids = torch.randint(0, 64, (2, 8))
    args = (ids, torch.ones_like(ids))
    torch.onnx.export(Wrap(net), args, path, opset_version=DYNAMO_OPSET if exporter == "dynamo" else OPSET,
                      dynamo=exporter == "dynamo",
                      input_names=["input_ids", "attention_mask"], output_names=["hidden"],
                      **({} if exporter == "dynamo" else {"dynamic_axes": {"input_ids": {0: "b", 1: "s"},
                                                                         "attention_mask": {0: "b", 1: "s"}}}))
    m = onnx.load(path)
    for n in m.graph.node:  # per-node stack traces: most of a dynamo file, not what a deployed file holds
        del n.metadata_props[:]
        n.doc_string = ""
    write(m, path)
    for f in os.listdir(os.path.dirname(path)):  # a dynamo export may leave a .data file beside it
        if f.startswith(os.path.basename(path)) and f.endswith(".data"):
            os.remove(os.path.join(os.path.dirname(path), f))


def ifs(n_if: int, width: int = 8, seed: int = 0) -> onnx.ModelProto:
    """x -> [If(c) {then: + ct_i} {else: * ce_i}] * n_if: 2 * n_if bodies, each one node and one initializer."""
    rng = np.random.default_rng(seed)
    vi = lambda n, t=TensorProto.FLOAT, shape=(width,): helper.make_tensor_value_info(n, t, list(shape))
    nodes, x = [], "x"
    for i in range(n_if):
        body = {}
        for part, op in (("then", "Add"), ("else", "Mul")):
            c = rng.uniform(0.5, 1.5, width).astype(np.float32) * rng.choice([-1, 1], width).astype(np.float32)
            body[part] = helper.make_graph([helper.make_node(op, [x, f"c{part}{i}"], [f"{part}{i}"], name=f"{op}{i}")],
                                           f"{part}{i}", [], [vi(f"{part}{i}")],
                                           [numpy_helper.from_array(c, f"c{part}{i}")])
        nodes.append(helper.make_node("If", ["c"], [f"y{i}"], name=f"if{i}", then_branch=body["then"],
                                      else_branch=body["else"]))
        x = f"y{i}"
    g = helper.make_graph(nodes, f"ifs{n_if}", [vi("x"), vi("c", TensorProto.BOOL, ())], [vi(x)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gelu-onnx-bench")
    model.ir_version = IR_VERSION
    return model


def write(model: onnx.ModelProto, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(model.SerializeToString())
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/gelu-bench", help="folder for the models (default /tmp/gelu-bench)")
    ap.add_argument("--only", default="bert-base,bert-large,ext,synth", help="comma-separated subset")
    ap.add_argument("--ext-gb", type=float, default=4.5, help="weights of the external-data model in GB (default 4.5)")
    ap.add_argument("--ext-files", type=int, default=2, help="data files of the external-data model (default 2)")
    ap.add_argument("--synth", default="1000,10000,100000", help="GELU counts of the synthetic graphs")
    ap.add_argument("--ifs", type=int, default=3000, help="If nodes of ifs-N.onnx (--only ifs; default 3000)")
    ap.add_argument("--deep-layers", type=int, default=300, help="layers of the deep GPT-2 / BERT exports (default 300)")
    ap.add_argument("--deep", default="gpt2-torchscript,gpt2-dynamo,bert-torchscript,bert-dynamo",
                    help="which deep exports (--only deep)")
    ap.add_argument("--force", action="store_true", help="regenerate files that exist")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.commonpath([out, repo]) == repo:
        ap.error("--out must be outside the repository")
    os.makedirs(out, exist_ok=True)
    only = set(a.only.split(","))
    for name, cfg in BERT_CONFIGS.items():
        path = os.path.join(out, f"{name}.onnx")
        if name in only and (a.force or not os.path.exists(path)):
            t = time.perf_counter()
            write(bert(cfg), path)
            print(f"{path}: {os.path.getsize(path) / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s", flush=True)
    if "ext" in only:
        d = os.path.join(out, "ext")
        path = os.path.join(d, "ext.onnx")
        if a.force or not os.path.exists(path):
            os.makedirs(d, exist_ok=True)
            t = time.perf_counter()
            cfg = dict(EXT_CONFIG, layers=ext_layers(a.ext_gb))
            write(bert(cfg, data_dir=d, n_files=a.ext_files), path)
            data = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".data"))
            print(f"{path}: {cfg['layers']} layers, {data / 1e9:.2f} GB of weights in {a.ext_files} files, "
                  f"{time.perf_counter() - t:.1f} s", flush=True)
    if "synth" in only:
        for n in (int(s) for s in a.synth.split(",") if s):
            path = os.path.join(out, f"synth-{n}.onnx")
            if a.force or not os.path.exists(path):
                t = time.perf_counter()
                write(synthetic(n), path)
                print(f"{path}: {n} GELUs, {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s",
                      flush=True)
    if "ifs" in only:
        path = os.path.join(out, f"ifs-{a.ifs}.onnx")
        if a.force or not os.path.exists(path):
            write(ifs(a.ifs), path)
            print(f"{path}: {a.ifs} If nodes, {os.path.getsize(path) / 1e6:.1f} MB", flush=True)
    if "deep" in only:
        for which in filter(None, a.deep.split(",")):
            arch, exporter = which.split("-")
            path = os.path.join(out, f"deep-{arch}-{a.deep_layers}-{exporter}.onnx")
            if a.force or not os.path.exists(path):
                t = time.perf_counter()
                deep_export(arch, a.deep_layers, exporter, path)
                n = len(onnx.load(path, load_external_data=False).graph.node)
                print(f"{path}: {n} nodes, {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
