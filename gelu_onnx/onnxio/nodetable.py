"""One graph's nodes as Python lists (onnxio.validate reads them in its
one pass; fusion.graph.GraphIndex indexes them instead of reading again)."""
from __future__ import annotations

from dataclasses import dataclass

import onnx


@dataclass
class NodeTable:
    """One graph's nodes as Python lists, read once while validating.
    Reading protobuf fields is most of what a pass over a big graph costs,
    so the fuse pass indexes these (fusion.graph.GraphIndex) rather than
    reading the nodes again. Valid while ``graph`` is unchanged."""

    graph: onnx.GraphProto
    nodes: list
    ops: list[str]
    domains: list[str]
    labels: list[str]          # node names
    ins: list[list[str]]       # as stored ("" = omitted optional input)
    outs: list[list[str]]
    with_subgraphs: list[int]  # the nodes that hold If/Loop/Scan bodies
    attributed: list[int]      # the nodes with any attribute
