"""Finding GELUs in a graph and rewriting them into one target's op (match -> plan -> rewrite)."""
