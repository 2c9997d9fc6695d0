#include "gelu_plugin.h"

#include <atomic>
#include <cstdio>
#include <type_traits>

#include "gelu_contract.h"
#include "gelu_kernels.h"

namespace gelu_trt {

// The core mirrors TensorRT's enum values so it can stay TensorRT-free; these
// make a header that renumbered them fail to compile instead of misbehaving.
static_assert(static_cast<int32_t>(nvinfer1::DataType::kFLOAT) == static_cast<int32_t>(DType::kFLOAT), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kHALF) == static_cast<int32_t>(DType::kHALF), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kINT8) == static_cast<int32_t>(DType::kINT8), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kINT32) == static_cast<int32_t>(DType::kINT32), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kBOOL) == static_cast<int32_t>(DType::kBOOL), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kUINT8) == static_cast<int32_t>(DType::kUINT8), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kFP8) == static_cast<int32_t>(DType::kFP8), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kBF16) == static_cast<int32_t>(DType::kBF16), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::DataType::kINT64) == static_cast<int32_t>(DType::kINT64), "DataType");
static_assert(static_cast<int32_t>(nvinfer1::TensorFormat::kLINEAR) == kFormatLinear, "TensorFormat");
static_assert(std::is_same<std::remove_extent<decltype(nvinfer1::Dims{}.d)>::type, int64_t>::value,
              "TensorRT >= 10 (64-bit Dims) is required");

namespace {

std::atomic<nvinfer1::ILoggerFinder*> g_logger_finder{nullptr};

Shape shape_of(const nvinfer1::Dims& d) { return Shape{d.nbDims, d.d}; }

}  // namespace

void set_logger_finder(nvinfer1::ILoggerFinder* finder) noexcept { g_logger_finder.store(finder); }

void log_error(const std::string& message) noexcept {
  try {
    const std::string line = "gelu-onnx TensorRT plugin: " + message;
    nvinfer1::ILogger* logger = nullptr;
    if (nvinfer1::ILoggerFinder* finder = g_logger_finder.load()) logger = finder->findLogger();
    if (logger == nullptr) logger = getLogger();
    if (logger != nullptr) {
      logger->log(nvinfer1::ILogger::Severity::kERROR, line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  } catch (...) {
    // logging must never throw into TensorRT
  }
}

GeluPlugin::GeluPlugin(const OpInfo& op, const Params& params, std::string plugin_namespace)
    : op_(op), params_(params), namespace_(std::move(plugin_namespace)), description_(describe(op, params)) {}

void GeluPlugin::report(const char* method, const Status& s) const noexcept {
  log_error(std::string(op_.op_type) + "::" + method + ": " + s.message());
}

nvinfer1::IPluginCapability* GeluPlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept {
  switch (type) {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
  }
  return nullptr;
}

nvinfer1::IPluginV3* GeluPlugin::clone() noexcept {
  try {
    return new GeluPlugin(op_, params_, namespace_);
  } catch (...) {
    log_error(std::string(op_.op_type) + "::clone: out of memory");
    return nullptr;
  }
}

const char* GeluPlugin::getPluginName() const noexcept { return op_.op_type; }
const char* GeluPlugin::getPluginVersion() const noexcept { return GELU_ONNX_OPSET_VERSION_STR; }
const char* GeluPlugin::getPluginNamespace() const noexcept { return namespace_.c_str(); }

int32_t GeluPlugin::getNbOutputs() const noexcept { return kNbOutputs; }

int32_t GeluPlugin::configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nbInputs,
                                    const nvinfer1::DynamicPluginTensorDesc* out, int32_t nbOutputs) noexcept {
  if (in == nullptr || out == nullptr || nbInputs != nb_inputs(params_) || nbOutputs != kNbOutputs) {
    report("configurePlugin", Status::Error("expected " + std::to_string(nb_inputs(params_)) + " input(s), got " +
                                            std::to_string(nbInputs)));
    return 1;
  }
  // The declared dims (-1 for dynamic axes) and the profile's min / max
  // bounds must all satisfy the bias rule; onShapeChange re-checks the
  // concrete shapes at run time.
  Shape s[2] = {};
  Status st = Status::Ok();
  for (const nvinfer1::Dims nvinfer1::DynamicPluginTensorDesc::*bound :
       {&nvinfer1::DynamicPluginTensorDesc::min, &nvinfer1::DynamicPluginTensorDesc::max}) {
    if (!st.ok() || (in[0].*bound).nbDims < 0) continue;  // bounds may be absent
    for (int32_t i = 0; i < nbInputs; ++i) s[i] = shape_of(in[i].*bound);
    st = check_shapes(params_, s, nbInputs);
  }
  if (st.ok()) {
    for (int32_t i = 0; i < nbInputs; ++i) s[i] = shape_of(in[i].desc.dims);
    st = check_shapes(params_, s, nbInputs);
  }
  if (st.ok() && in[0].desc.type != out[0].desc.type) st = Status::Error("Y must have X's data type");
  if (!st.ok()) {
    report("configurePlugin", st);
    return 1;
  }
  return 0;
}

int32_t GeluPlugin::getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
                                       const nvinfer1::DataType* inputTypes, int32_t nbInputs) const noexcept {
  DType in[2] = {DType::kFLOAT, DType::kFLOAT};
  if (inputTypes == nullptr || outputTypes == nullptr || nbInputs < 0 || nbInputs > 2) {
    report("getOutputDataTypes", Status::Error("malformed arguments"));
    return 1;
  }
  for (int32_t i = 0; i < nbInputs; ++i) in[i] = static_cast<DType>(inputTypes[i]);
  DType out = DType::kFLOAT;
  const Status st = output_types(params_, in, nbInputs, &out, nbOutputs);
  if (!st.ok()) {
    report("getOutputDataTypes", st);
    return 1;
  }
  outputTypes[0] = static_cast<nvinfer1::DataType>(out);
  return 0;
}

int32_t GeluPlugin::getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nbInputs,
                                    const nvinfer1::DimsExprs* /*shapeInputs*/, int32_t nbShapeInputs,
                                    nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                                    nvinfer1::IExprBuilder& /*exprBuilder*/) noexcept {
  if (inputs == nullptr || outputs == nullptr || nbInputs != nb_inputs(params_) || nbShapeInputs != 0 ||
      nbOutputs != kNbOutputs) {
    report("getOutputShapes", Status::Error("expected " + std::to_string(nb_inputs(params_)) +
                                            " input(s), no shape inputs and 1 output"));
    return 1;
  }
  if (params_.bias && (inputs[1].nbDims != 1 || inputs[0].nbDims < 1)) {
    report("getOutputShapes", Status::Error("bias must be 1-D and X must have rank >= 1"));
    return 1;
  }
  outputs[0] = inputs[0];  // elementwise: Y has X's shape
  return 0;
}

bool GeluPlugin::supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* inOut,
                                           int32_t nbInputs, int32_t nbOutputs) noexcept {
  if (inOut == nullptr || nbInputs < 0 || nbOutputs < 0 || nbInputs + nbOutputs > 3 || pos < 0 ||
      pos >= nbInputs + nbOutputs) {
    return false;
  }
  TensorTypeFormat tf[3];
  for (int32_t i = 0; i <= pos; ++i) {  // TensorRT only guarantees inOut[0..pos]
    tf[i] = TensorTypeFormat{static_cast<DType>(inOut[i].desc.type), static_cast<int32_t>(inOut[i].desc.format)};
  }
  return supports_format_combination(params_, pos, tf, nbInputs, nbOutputs);
}

size_t GeluPlugin::getWorkspaceSize(const nvinfer1::DynamicPluginTensorDesc* /*inputs*/, int32_t /*nbInputs*/,
                                    const nvinfer1::DynamicPluginTensorDesc* /*outputs*/,
                                    int32_t /*nbOutputs*/) const noexcept {
  return 0;
}

const char* GeluPlugin::getTimingCacheID() noexcept { return description_.c_str(); }
const char* GeluPlugin::getMetadataString() noexcept { return description_.c_str(); }

Status GeluPlugin::check_io(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs,
                            const nvinfer1::PluginTensorDesc* out, int32_t nbOutputs) const {
  if (in == nullptr || nbInputs != nb_inputs(params_) || nbOutputs != kNbOutputs || out == nullptr) {
    return Status::Error("expected " + std::to_string(nb_inputs(params_)) + " input(s) and 1 output");
  }
  Shape s[2] = {};
  for (int32_t i = 0; i < nbInputs; ++i) s[i] = shape_of(in[i].dims);
  LaunchArgs a;
  Status st = launch_args(params_, static_cast<DType>(in[0].type), s, nbInputs, &a);
  if (st.ok() && out[0].type != in[0].type) st = Status::Error("Y must have X's data type");
  return st;
}

int32_t GeluPlugin::onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nbInputs,
                                  const nvinfer1::PluginTensorDesc* out, int32_t nbOutputs) noexcept {
  const Status st = check_io(in, nbInputs, out, nbOutputs);
  if (!st.ok()) {
    report("onShapeChange", st);
    return 1;
  }
  return 0;
}

int32_t GeluPlugin::enqueue(const nvinfer1::PluginTensorDesc* inputDesc, const nvinfer1::PluginTensorDesc* /*outputDesc*/,
                            const void* const* inputs, void* const* outputs, void* /*workspace*/,
                            cudaStream_t stream) noexcept {
  if (inputDesc == nullptr || inputs == nullptr || outputs == nullptr) {
    report("enqueue", Status::Error("null arguments"));
    return 1;
  }
  const int32_t nin = nb_inputs(params_);
  Shape s[2] = {};
  for (int32_t i = 0; i < nin; ++i) s[i] = shape_of(inputDesc[i].dims);
  LaunchArgs a;
  const Status st = launch_args(params_, static_cast<DType>(inputDesc[0].type), s, nin, &a);
  if (!st.ok()) {
    report("enqueue", st);
    return 1;
  }
  if (a.n == 0) return 0;  // empty tensor: nothing to do
  const gelu_status_t rc = gelu_cuda_launch(a.form, a.dtype, inputs[0], params_.bias ? inputs[1] : nullptr,
                                            a.bias_len, outputs[0], a.n, a.alpha, static_cast<void*>(stream));
  if (rc != GELU_OK) {
    // The CUDA error's own text (cudaGetErrorString) is what a user can act on.
    std::string why = "gelu_cuda_launch failed with status " + std::to_string(static_cast<int>(rc));
    const char* cuda = (rc == GELU_ERR_CUDA || rc == GELU_ERR_NO_CUDA) ? gelu_cuda_last_error() : nullptr;
    if (cuda != nullptr && *cuda != '\0') why += std::string(": ") + cuda;
    report("enqueue", Status::Error(why));
    return 1;
  }
  return 0;
}

nvinfer1::IPluginV3* GeluPlugin::attachToContext(nvinfer1::IPluginResourceContext* /*context*/) noexcept {
  return clone();  // no per-context resources
}

const nvinfer1::PluginFieldCollection* GeluPlugin::getFieldsToSerialize() noexcept {
  try {
    state_ = serialize(params_);
    fields_.clear();
    fields_.emplace_back(kStateFieldName, state_.data(), nvinfer1::PluginFieldType::kUNKNOWN,
                         static_cast<int32_t>(state_.size()));
    field_collection_.nbFields = static_cast<int32_t>(fields_.size());
    field_collection_.fields = fields_.data();
    return &field_collection_;
  } catch (...) {
    log_error(std::string(op_.op_type) + "::getFieldsToSerialize: out of memory");
    return nullptr;
  }
}

}  // namespace gelu_trt
