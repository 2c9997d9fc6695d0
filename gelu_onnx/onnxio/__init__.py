"""Reading, validating and writing ONNX files without losing a user's data."""
