"""Reading one graph: who writes and reads each tensor, constants and their folding, shapes
(graph.GraphIndex over the native scanner's arrays)."""
