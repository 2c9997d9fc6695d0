"""The op sets the matcher reasons with (fusion.graph re-exports them)."""

# Ops that may sit inside a GELU spelling. All are elementwise on one
# non-constant operand plus scalar constants.
BINARY_OPS = {"Add", "Sub", "Mul", "Div", "Pow"}
UNARY_OPS = {"Neg", "Erf", "Tanh", "Sigmoid", "Cast", "Identity", "Sqrt", "Reciprocal"}
ELEMENTWISE = BINARY_OPS | UNARY_OPS
ANCHOR_OPS = {"Erf", "Tanh", "Sigmoid"}
# Ops we are willing to constant-fold when all their inputs are constants.
FOLDABLE = ELEMENTWISE
