"""plugins/common/gelu_contract.h mirrors gelu_onnx/contract.py: the domain,
opset, attribute, QuickGELU alpha and the op table (op type, form, bias) row
by row, which the ORT library and the TensorRT plugin core expand."""
import re
from pathlib import Path

from gelu_onnx import contract as C

HEADER = Path(__file__).resolve().parents[1] / "plugins/common/gelu_contract.h"


def header():
    text = HEADER.read_text()
    defs = dict(re.findall(r'#define\s+(\w+)\s+"([^"]*)"', text))
    return text, defs


def test_names_and_constants():
    text, defs = header()
    assert defs["GELU_ONNX_DOMAIN"] == C.DOMAIN
    assert defs["GELU_ONNX_OPSET_VERSION_STR"] == str(C.OPSET_VERSION)
    assert re.search(rf"#define\s+GELU_ONNX_OPSET_VERSION\s+{C.OPSET_VERSION}\b", text)
    assert defs["GELU_ONNX_ATTR_ALPHA"] == C.ATTR_ALPHA
    alpha = float(re.search(r"GELU_ONNX_QUICK_GELU_ALPHA\s+([0-9.]+)f", text).group(1))
    assert alpha == C.QUICK_GELU_ALPHA


def test_op_table_rows():
    text, defs = header()
    rows = re.findall(r"X\((GELU_ONNX_OP_\w+), GELU_FORM_(\w+), (true|false)\)", text)
    table = {defs[name]: (form.lower(), bias == "true") for name, form, bias in rows}
    assert len(rows) == len(table) == len(C.OP_TYPES)
    assert table == C.FORM_OF_OP_TYPE


def test_cpp_tables_expand_the_header():
    # no second hand-written list of op types in the C++ that registers them:
    # neither the header's op names nor the op types as string literals
    _, defs = header()
    names = [n for n in defs if n.startswith("GELU_ONNX_OP_")]
    assert len(names) == len(C.OP_TYPES)
    root = HEADER.parents[1]
    for src in ("ort/gelu_ort.cpp", "tensorrt/core/gelu_trt_core.cpp"):
        text = (root / src).read_text()
        assert "GELU_ONNX_FOR_EACH_OP(" in text, src
        restated = [n for n in names if n in text] + [op for op in C.OP_TYPES.values() if f'"{op}"' in text]
        assert not restated, (src, restated)
