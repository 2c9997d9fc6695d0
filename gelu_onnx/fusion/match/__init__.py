"""What a GELU is: candidate regions by structure (region), the float64
value check (numeric), the matcher (matcher), the bias search (bias), single-op GELUs
(single_op), legacy plugin nodes (legacy), and what they report (findings)."""
