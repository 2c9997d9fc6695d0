// TensorRT IPluginV3 for the fused GELU ops (TensorRT >= 10.0). A thin layer:
// every decision is made by the TensorRT-free core (core/gelu_trt_core.h);
// this file only converts TensorRT's structs and calls the shared kernels.
#pragma once

#include <NvInferRuntime.h>

#include <string>
#include <vector>

#include "gelu_trt_core.h"

namespace gelu_trt {

// Logging: TensorRT hands a logger finder to libraries it loads
// (setLoggerFinder); otherwise libnvinfer's global logger, else stderr.
void set_logger_finder(nvinfer1::ILoggerFinder* finder) noexcept;
void log_error(const std::string& message) noexcept;

class GeluPlugin final : public nvinfer1::IPluginV3,
                         public nvinfer1::IPluginV3OneCore,
                         public nvinfer1::IPluginV3OneBuild,
                         public nvinfer1::IPluginV3OneRuntime {
 public:
  GeluPlugin(const OpInfo& op, const Params& params, std::string plugin_namespace);
  ~GeluPlugin() override = default;
  GeluPlugin(const GeluPlugin&) = delete;
  GeluPlugin& operator=(const GeluPlugin&) = delete;

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
  nvinfer1::IPluginV3* clone() noexcept override;

  // IPluginV3OneCore
  const char* getPluginName() const noexcept override;
  const char* getPluginVersion() const noexcept override;
  const char* getPluginNamespace() const noexcept override;

  // IPluginV3OneBuild
  int32_t configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nbInputs,
                          const nvinfer1::DynamicPluginTensorDesc* out, int32_t nbOutputs) noexcept override;
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
                             const nvinfer1::DataType* inputTypes, int32_t nbInputs) const noexcept override;
  int32_t getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nbInputs, const nvinfer1::DimsExprs* shapeInputs,
                          int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder& exprBuilder) noexcept override;
  bool supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* inOut, int32_t nbInputs,
                                 int32_t nbOutputs) noexcept override;
  int32_t getNbOutputs() const noexcept override;
  size_t getWorkspaceSize(const nvinfer1::DynamicPluginTensorDesc* inputs, int32_t nbInputs,
                          const nvinfer1::DynamicPluginTensorDesc* outputs, int32_t nbOutputs) const noexcept override;
  const char* getTimingCacheID() noexcept override;
  const char* getMetadataString() noexcept override;

  // IPluginV3OneRuntime
  int32_t onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs, const nvinfer1::PluginTensorDesc* out,
                        int32_t nbOutputs) noexcept override;
  int32_t enqueue(const nvinfer1::PluginTensorDesc* inputDesc, const nvinfer1::PluginTensorDesc* outputDesc,
                  const void* const* inputs, void* const* outputs, void* workspace,
                  cudaStream_t stream) noexcept override;
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
  const nvinfer1::PluginFieldCollection* getFieldsToSerialize() noexcept override;

  const Params& params() const { return params_; }

 private:
  Status check_io(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs, const nvinfer1::PluginTensorDesc* out,
                  int32_t nbOutputs) const;
  void report(const char* method, const Status& s) const noexcept;

  const OpInfo& op_;
  Params params_;
  std::string namespace_;
  std::string description_;  // "GeluSigmoid(alpha=1.702)": timing-cache id and metadata
  std::vector<uint8_t> state_;
  std::vector<nvinfer1::PluginField> fields_;
  nvinfer1::PluginFieldCollection field_collection_{};
};

}  // namespace gelu_trt
