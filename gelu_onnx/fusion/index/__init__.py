"""Reading one graph: who writes and reads each tensor, constants and their folding
(graph: GraphIndex over the native scanner's arrays), shapes (shapes)."""
