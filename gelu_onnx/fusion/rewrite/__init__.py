"""Writing the result: the target's nodes for a match (emit), a scanned graph rewritten at
the byte level (setrewrite, nodebytes), and the input's check model (checkmodel)."""
