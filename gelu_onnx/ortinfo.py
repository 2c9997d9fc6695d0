"""What the installed onnxruntime accepts, asked of the runtime itself.

Runtimes move (onnxruntime 1.31 loads IR <= 13, 1.32 loads 14), so nothing
here is a table of versions: each fact is probed once per process by loading
a one-node model, and cached.
"""
from __future__ import annotations

import functools


def version() -> str:
    import onnxruntime as ort

    return ort.__version__


def _quiet_options():
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # the refusals below are expected: keep stderr clean
    return so


def loads_ir(ir: int) -> bool:
    """True when the installed onnxruntime loads a model of IR version ``ir``
    (an Identity at opset 13, which every supported runtime knows)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ir_probe",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir)
    try:
        ort.InferenceSession(m.SerializeToString(), _quiet_options(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal means "not this IR"
        return False
    return True


@functools.lru_cache(maxsize=None)
def max_ir_version() -> int:
    """Highest IR version the installed onnxruntime loads (probed downward
    from two above what the installed onnx writes; IR 7 is opset 13's floor)."""
    import onnx

    for ir in range(onnx.IR_VERSION + 2, 6, -1):
        if loads_ir(ir):
            return ir
    return 6
