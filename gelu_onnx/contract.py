"""The one source of truth for names, constants and tolerances.

Everything that another component relies on lives here: the custom op's
domain / op types / attributes (mirrored, and checked by a test, in
``plugins/common/gelu_contract.h``), the GELU constants, and the per-dtype
tolerances used both for matching constants and for parity checks.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

# --- The custom op ---------------------------------------------------------
# One logical op, spelled as one op type per (form, bias) so that every op
# type has a single fixed body when shipped as a model-local function (a
# function cannot branch on an attribute or on an absent optional input).
# TensorRT: plugin name = op type, plugin version = str(OPSET_VERSION),
# plugin namespace = DOMAIN.
DOMAIN = "ai.gelu_onnx"
OPSET_VERSION = 1

FORMS = ("erf", "tanh", "sigmoid")

OP_TYPES = {
    ("erf", False): "GeluErf",
    ("tanh", False): "GeluTanh",
    ("sigmoid", False): "GeluSigmoid",
    ("erf", True): "BiasGeluErf",
    ("tanh", True): "BiasGeluTanh",
    ("sigmoid", True): "BiasGeluSigmoid",
}
FORM_OF_OP_TYPE = {op: key for key, op in OP_TYPES.items()}

# Written on every custom node: TensorRT >= 10.15's ONNX parser only maps a
# node that has a model-local function to a plugin when the node names the
# plugin namespace (onnx-tensorrt ModelImporter.cpp parseNode; see
# plugins/tensorrt/README.md). Our ORT kernels and the function ignore it.
ATTR_PLUGIN_NAMESPACE = "plugin_namespace"

# The sigmoid forms carry alpha: y = x * sigmoid(alpha * x).
ATTR_ALPHA = "alpha"
QUICK_GELU_ALPHA = 1.702
# x*sigmoid(a*x) is only a GELU for a near 1.702; a = 1 is SiLU/Swish, which we
# must not relabel. Band chosen to include every published QuickGELU spelling.
SIGMOID_ALPHA_RANGE = (1.5, 1.9)

# --- GELU constants --------------------------------------------------------
SQRT2 = math.sqrt(2.0)
INV_SQRT2 = 1.0 / SQRT2
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC_COEFF = 0.044715

# --- dtypes ----------------------------------------------------------------
FLOAT_DTYPES = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.DOUBLE: "float64",
}
# Kernel dtypes (what the custom op / plugin accept).
KERNEL_DTYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)

# Function-level matching tolerance: a candidate subgraph f is accepted as the
# GELU g when max |f(x) - g(x)| / max(|x|, 1) over the probe grid is at most
# this, keyed by the dtype the region's constants are stored in. Measured
# (scripts in docs/design.md): rounding every standard spelling's constants
# to the dtype costs at most 2.6e-5 (fp16), 2.9e-4 (bf16), 6e-9 (fp32); a
# constant one ulp off (e.g. 1.0009765625 for 1 in fp16) costs 9.8e-4 (fp16),
# 7.8e-3 (bf16). The bounds sit ~8x above the first and ~4x below the second,
# so a fused fp16 model stays well inside the fp16 parity goal (2e-3).
MATCH_TOLERANCE = {
    "float64": 1e-7,
    "float32": 1e-6,
    "float16": 2e-4,
    "bfloat16": 2e-3,
}

# Default parity tolerances (max |a-b| <= atol + rtol*|b|) per output dtype.
# fp32 / fp16 figures are the product's acceptance goals.
PARITY_TOLERANCE = {
    "float64": {"rtol": 1e-7, "atol": 1e-9},
    "float32": {"rtol": 1e-5, "atol": 1e-5},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2},
}

# Model-local functions need IR >= 8.
MIN_IR_FOR_FUNCTIONS = 8
# ONNX Gelu (approximate none|tanh) exists from opset 20.
STANDARD_GELU_OPSET = 20
MS_DOMAIN = "com.microsoft"


def np_dtype(elem_type: int):
    """numpy dtype for an ONNX float elem_type (bfloat16 via ml_dtypes)."""
    if elem_type == TensorProto.BFLOAT16:
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


# --- The commands' options (here so that building the CLI's parser imports
# nothing of gelu_onnx.verify) ------------------------------------------------
# where `check` runs a model, and ONNX Runtime's graph optimization levels
PROVIDERS = ("cpu", "cuda", "tensorrt")
OPT_LEVELS = ("disable", "basic", "extended", "all")
LOCALIZE_MODES = ("gelus", "all")  # check --localize
# the size given to a symbolic input dim: by check (small: parity) and by bench
DIM_DEFAULT = 4
BENCH_DIM_DEFAULT = 8  # BERT-base 8x8 on 2 cores: ~0.3 s a run, so bench's defaults take well under a minute

# `check`'s default verdict (gelu_onnx.verify.verdict), per float output:
# mean|fused-ref| <= max(mean_factor * mean|orig-ref|, floor_eps[dtype]["mean"] * eps * rms(ref))
# max |fused-ref| <= max(max_factor  * max |orig-ref|, floor_eps[dtype]["max"]  * eps * max|ref|)
# ref: the original run in float64 (float32 for fp16/bf16; islands in float32
# where ONNX Runtime has no kernel), CPU, no graph optimizations. Measured on
# 12-layer BERT/ViT/bf16 MLP stacks (docs/verdict.md): fused/original mean
# ratio 0.39-1.02, max ratio 0.36-1.27 for correct fusions; a fault planted in
# one GELU of 12: 3.4x (a dropped bias of std 0.05, bf16) to 700 000x. The
# floors stand in where the original is (nearly) exact: what a correct fused
# GELU may cost there, its kernels' accuracy contract (docs/kernels.md):
# float32 a few ulp (erf <= 6.5), fp16/bf16 within one ulp of the correctly
# rounded result. Issue 32: additive floors of 2 and 8 eps passed a dropped
# bias in a bf16 stack (bound 0.0386 vs fault 0.0315).
REFERENCE_VERDICT = {
    "mean_factor": 2.0,
    "max_factor": 4.0,
    "floor_eps": {"float64": {"mean": 2.0, "max": 8.0}, "float32": {"mean": 2.0, "max": 8.0},
                  "float16": {"mean": 0.5, "max": 2.0}, "bfloat16": {"mean": 0.5, "max": 2.0}},
}
# A check's output passes only when its verdict rests on enough elements: at
# least one finite in every run, and at least this fraction of its elements
# finite (or the same infinity) in every run (gelu_onnx.verify.verdict.certify).
# An empty or all-NaN output proves nothing (issue 32: --scale nan passed a
# fused model computing Relu where the GELU was).
MIN_COMPARED_FRACTION = 0.5
# The largest retyped copy of the original's weights the reference makes
# (BERT-base fp32 -> float64: 0.8 GiB, check's peak RSS 7.2 GB; beyond this
# the next, cheaper reference is used and a note says so).
REFERENCE_MAX_BYTES = 4 * 2**30
