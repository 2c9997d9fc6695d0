// The op contract shared by the ONNX Runtime custom-op library and the
// TensorRT plugin. Mirrors gelu_onnx/contract.py (tests/test_contract.py
// checks that the two agree, the op table row by row, and that the ORT
// library and the TensorRT core expand GELU_ONNX_FOR_EACH_OP, not a copy).
#pragma once

#define GELU_ONNX_DOMAIN "ai.gelu_onnx"
#define GELU_ONNX_OPSET_VERSION 1
#define GELU_ONNX_OPSET_VERSION_STR "1"
#define GELU_ONNX_ATTR_ALPHA "alpha"
#define GELU_ONNX_QUICK_GELU_ALPHA 1.702f

// Op types: one per (form, bias).
#define GELU_ONNX_OP_GELU_ERF "GeluErf"
#define GELU_ONNX_OP_GELU_TANH "GeluTanh"
#define GELU_ONNX_OP_GELU_SIGMOID "GeluSigmoid"
#define GELU_ONNX_OP_BIAS_GELU_ERF "BiasGeluErf"
#define GELU_ONNX_OP_BIAS_GELU_TANH "BiasGeluTanh"
#define GELU_ONNX_OP_BIAS_GELU_SIGMOID "BiasGeluSigmoid"

// The op table, declared once for the C++ side: GELU_ONNX_FOR_EACH_OP(X)
// expands X(op type, gelu_form_t value, takes a bias) per op (the includer
// also includes gelu_kernels.h for gelu_form_t).
#define GELU_ONNX_FOR_EACH_OP(X)                          \
  X(GELU_ONNX_OP_GELU_ERF, GELU_FORM_ERF, false)          \
  X(GELU_ONNX_OP_GELU_TANH, GELU_FORM_TANH, false)        \
  X(GELU_ONNX_OP_GELU_SIGMOID, GELU_FORM_SIGMOID, false)  \
  X(GELU_ONNX_OP_BIAS_GELU_ERF, GELU_FORM_ERF, true)      \
  X(GELU_ONNX_OP_BIAS_GELU_TANH, GELU_FORM_TANH, true)    \
  X(GELU_ONNX_OP_BIAS_GELU_SIGMOID, GELU_FORM_SIGMOID, true)
