"""What a GELU is: candidate regions by structure and the search over them (matcher), the
float64 value check (numeric), the bias search (bias), GELUs that are one
node already, legacy plugin nodes too (single_op).
What they find (Match, NearMiss) is fusion/report."""
