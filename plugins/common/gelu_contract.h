// The op contract shared by the ONNX Runtime custom-op library and the
// TensorRT plugin. Mirrors gelu_onnx/contract.py (tests/test_contract.py
// checks that the two agree).
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
