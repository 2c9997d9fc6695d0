// One IPluginCreatorV3One per op type: plugin name = op type, version = the
// op-set version ("1"), namespace = the op domain ("ai.gelu_onnx"), or ""
// for the default-namespace aliases (see plugin_registration.cpp).
#pragma once

#include <NvInferRuntime.h>

#include <string>
#include <vector>

#include "gelu_trt_core.h"

namespace gelu_trt {

class GeluPluginCreator final : public nvinfer1::IPluginCreatorV3One {
 public:
  GeluPluginCreator(const OpInfo& op, std::string plugin_namespace);
  ~GeluPluginCreator() override = default;

  // kBUILD: `fc` holds the ONNX node's attributes (what the parser forwards);
  // kRUNTIME: `fc` is what GeluPlugin::getFieldsToSerialize produced.
  nvinfer1::IPluginV3* createPlugin(const char* name, const nvinfer1::PluginFieldCollection* fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override;
  const nvinfer1::PluginFieldCollection* getFieldNames() noexcept override;
  const char* getPluginName() const noexcept override;
  const char* getPluginVersion() const noexcept override;
  const char* getPluginNamespace() const noexcept override;

  const OpInfo& op() const { return op_; }

 private:
  const OpInfo& op_;
  std::string namespace_;
  std::vector<nvinfer1::PluginField> field_names_;
  nvinfer1::PluginFieldCollection field_collection_{};
};

}  // namespace gelu_trt
