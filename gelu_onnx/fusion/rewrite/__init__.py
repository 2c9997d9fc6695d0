"""Writing the result: the target's nodes for a match, or for a set of matches as bytes (emit), a scanned
graph rewritten at the byte level (setrewrite), and the input's check model (checkmodel)."""
