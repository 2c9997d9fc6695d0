"""Proving a fused model computes what the original did: inputs, runners, comparison, the check."""
