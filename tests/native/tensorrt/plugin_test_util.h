// Helpers shared by the plugin's C++ test programs that talk to the real
// TensorRT interfaces (test_plugin_layer.cpp, test_standin_sequence.cpp).
#pragma once
#include <NvInferRuntime.h>

#include <initializer_list>
#include <memory>

#include "gelu_contract.h"

namespace plugin_test {

struct Deleter {
  void operator()(nvinfer1::IPluginV3* p) const { delete p; }
};
using PluginPtr = std::unique_ptr<nvinfer1::IPluginV3, Deleter>;

inline nvinfer1::Dims dims(std::initializer_list<int64_t> v) {
  nvinfer1::Dims d{};
  d.nbDims = static_cast<int32_t>(v.size());
  int i = 0;
  for (int64_t x : v) d.d[i++] = x;
  return d;
}

// createPlugin in the build phase with the fields exactly as TensorRT's ONNX
// parser builds them (ONNX FLOAT attribute -> kFLOAT32, length 1): alpha for
// the sigmoid ops, nothing for the others.
inline PluginPtr build_plugin(nvinfer1::IPluginCreatorV3One* creator, bool sigmoid, float alpha, const char* name) {
  nvinfer1::PluginField f(GELU_ONNX_ATTR_ALPHA, &alpha, nvinfer1::PluginFieldType::kFLOAT32, 1);
  nvinfer1::PluginFieldCollection fc{sigmoid ? 1 : 0, sigmoid ? &f : nullptr};
  return PluginPtr(creator->createPlugin(name, &fc, nvinfer1::TensorRTPhase::kBUILD));
}

}  // namespace plugin_test
