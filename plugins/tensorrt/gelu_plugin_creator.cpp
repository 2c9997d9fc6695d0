#include "gelu_plugin_creator.h"

#include <stdexcept>

#include "gelu_contract.h"
#include "gelu_plugin.h"

namespace gelu_trt {

static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kFLOAT16) == static_cast<int32_t>(FieldType::kFLOAT16), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kFLOAT32) == static_cast<int32_t>(FieldType::kFLOAT32), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kFLOAT64) == static_cast<int32_t>(FieldType::kFLOAT64), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kINT32) == static_cast<int32_t>(FieldType::kINT32), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kCHAR) == static_cast<int32_t>(FieldType::kCHAR), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kUNKNOWN) == static_cast<int32_t>(FieldType::kUNKNOWN), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kBF16) == static_cast<int32_t>(FieldType::kBF16), "PluginFieldType");
static_assert(static_cast<int32_t>(nvinfer1::PluginFieldType::kINT64) == static_cast<int32_t>(FieldType::kINT64), "PluginFieldType");

GeluPluginCreator::GeluPluginCreator(const OpInfo& op, std::string plugin_namespace)
    : op_(op), namespace_(std::move(plugin_namespace)) {
  for (const FieldSpec& f : advertised_fields(op_)) {
    field_names_.emplace_back(f.name, nullptr, static_cast<nvinfer1::PluginFieldType>(f.type), f.length);
  }
  field_collection_.nbFields = static_cast<int32_t>(field_names_.size());
  field_collection_.fields = field_names_.empty() ? nullptr : field_names_.data();
}

nvinfer1::IPluginV3* GeluPluginCreator::createPlugin(const char* name, const nvinfer1::PluginFieldCollection* fc,
                                                     nvinfer1::TensorRTPhase phase) noexcept {
  try {
    std::vector<Field> fields;
    if (fc != nullptr && fc->nbFields > 0) {
      if (fc->fields == nullptr) throw std::invalid_argument("null field array");
      for (int32_t i = 0; i < fc->nbFields; ++i) {
        const nvinfer1::PluginField& f = fc->fields[i];
        fields.push_back(Field{f.name, f.data, static_cast<FieldType>(f.type), f.length});
      }
    }
    const int32_t n = static_cast<int32_t>(fields.size());
    Params params;
    const Status st = phase == nvinfer1::TensorRTPhase::kRUNTIME
                          ? params_from_serialized_fields(op_, fields.data(), n, &params)
                          : params_from_fields(op_, fields.data(), n, &params);
    if (!st.ok()) {
      log_error(std::string(op_.op_type) + " layer '" + (name ? name : "") + "': " + st.message());
      return nullptr;
    }
    return new GeluPlugin(op_, params, namespace_);
  } catch (const std::exception& e) {
    log_error(std::string(op_.op_type) + "::createPlugin: " + e.what());
  } catch (...) {
    log_error(std::string(op_.op_type) + "::createPlugin: unknown error");
  }
  return nullptr;
}

const nvinfer1::PluginFieldCollection* GeluPluginCreator::getFieldNames() noexcept { return &field_collection_; }
const char* GeluPluginCreator::getPluginName() const noexcept { return op_.op_type; }
const char* GeluPluginCreator::getPluginVersion() const noexcept { return GELU_ONNX_OPSET_VERSION_STR; }
const char* GeluPluginCreator::getPluginNamespace() const noexcept { return namespace_.c_str(); }

}  // namespace gelu_trt
