"""Raising a model's default-domain opset where a target needs it: what each schema change
means for an older node (steps), the rewrites (adapters), the pass (upgrade)."""
