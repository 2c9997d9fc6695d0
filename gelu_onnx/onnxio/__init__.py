"""Reading, validating and writing ONNX files without losing a user's data.

walk (every graph and tensor) -> format (format facts, the wire format) -> validate -> load;
irversion (the lowest IR a model needs); save (atomic writes, backups,
rollback) on fileops (temp files, modes, the one copy routine; signals
handled by gelu_onnx.interrupts); splice (big single-file models as a
skeleton whose weights stay in the file). See docs/safety.md.
"""
from __future__ import annotations

from .irversion import (IR_FLOOR, checkable_in_memory, lower_ir_version, lowest_ir_version, model_facts,
                        serialized_facts)
from .load import LoadedModel, load_model, load_model_proto, tensor_array
from .save import check_output_path, save_model
from .format import MAX_PROTO_BYTES
from .walk import iter_graphs, iter_tensors

__all__ = ["IR_FLOOR", "LoadedModel", "MAX_PROTO_BYTES", "check_output_path", "checkable_in_memory",
           "iter_graphs", "iter_tensors", "load_model", "load_model_proto", "lower_ir_version",
           "lowest_ir_version", "model_facts", "serialized_facts", "save_model", "tensor_array"]
