"""Writing the result: the target's nodes for a match (emit), a scanned graph rewritten
at the byte level (graph), and the input's check model (checkmodel)."""
