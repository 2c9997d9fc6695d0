// TensorRT-free core of the GELU TensorRT plugin: everything the plugin decides
// (which op a name is, how fields parse, the serialized state, type / format /
// shape rules, and the kernel launch arguments) lives here as plain C++17 so
// CI can build and test it without TensorRT or CUDA. The TensorRT-facing layer
// (gelu_plugin.cpp) only translates TensorRT structs to these and back.
//
// The enums below mirror TensorRT's numeric values (nvinfer1::DataType,
// nvinfer1::PluginFieldType, nvinfer1::TensorFormat::kLINEAR); the TensorRT
// layer static_asserts that they agree with the headers it is compiled against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gelu_kernels.h"

namespace gelu_trt {

enum class Form : int32_t { kErf = GELU_FORM_ERF, kTanh = GELU_FORM_TANH, kSigmoid = GELU_FORM_SIGMOID };

// nvinfer1::DataType values (only the ones this plugin names).
enum class DType : int32_t { kFLOAT = 0, kHALF = 1, kINT8 = 2, kINT32 = 3, kBOOL = 4, kUINT8 = 5, kFP8 = 6, kBF16 = 7, kINT64 = 8 };

// nvinfer1::PluginFieldType values.
enum class FieldType : int32_t {
  kFLOAT16 = 0, kFLOAT32 = 1, kFLOAT64 = 2, kINT8 = 3, kINT16 = 4, kINT32 = 5,
  kCHAR = 6, kDIMS = 7, kUNKNOWN = 8, kBF16 = 9, kINT64 = 10,
};

// nvinfer1::TensorFormat::kLINEAR.
constexpr int32_t kFormatLinear = 0;

// One (op type -> form, bias) row; the table mirrors gelu_onnx/contract.py.
struct OpInfo {
  const char* op_type;
  Form form;
  bool bias;
};

// All six op types, in a fixed order.
const std::vector<OpInfo>& op_table();
// nullptr when `op_type` is not one of ours.
const OpInfo* find_op(std::string_view op_type);
const char* form_name(Form form);  // "erf" | "tanh" | "sigmoid"

// The fields a creator advertises through getFieldNames(): TensorRT's ONNX
// parser forwards exactly these node attributes (when present) to createPlugin.
struct FieldSpec {
  const char* name;
  FieldType type;
  int32_t length;
};
std::vector<FieldSpec> advertised_fields(const OpInfo& op);  // sigmoid: {alpha, kFLOAT32, 1}

// Result of a fallible step: ok() or one human sentence saying what is wrong.
class Status {
 public:
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  explicit Status(std::string m) : failed_(true), message_(std::move(m)) {}
  bool failed_ = false;
  std::string message_;
};

// What one plugin instance computes.
struct Params {
  Form form = Form::kErf;
  bool bias = false;
  float alpha = 0.0f;  // used by the sigmoid forms only (0 otherwise)
};

// A neutral mirror of nvinfer1::PluginField.
struct Field {
  const char* name;
  const void* data;
  FieldType type;
  int32_t length;
};

// Build-phase fields, exactly as TensorRT's ONNX parser delivers node
// attributes: a FLOAT attribute arrives as kFLOAT32 with length 1 (INT as
// kINT32, STRING as kCHAR). `alpha` is optional for sigmoid ops (default
// 1.702) and rejected for the others; kFLOAT64 / kFLOAT16 are accepted for
// callers that build fields by hand. Unknown field names are ignored (TensorRT
// only passes the names the creator advertises; hand-built collections may
// carry extras such as plugin_namespace).
Status params_from_fields(const OpInfo& op, const Field* fields, int32_t nb_fields, Params* out);

// Serialized state: a versioned, endianness-explicit little-endian blob.
//   bytes 0..3  magic "GELU"
//   bytes 4..5  u16 format version (kStateVersion)
//   byte  6     u8 form (gelu_form_t)
//   byte  7     u8 flags (bit 0: bias input; other bits must be 0)
//   bytes 8..11 f32 alpha, IEEE-754 bits as a little-endian u32
constexpr uint16_t kStateVersion = 1;
constexpr size_t kStateSize = 12;
constexpr const char* kStateFieldName = "gelu_onnx_state";

std::vector<uint8_t> serialize(const Params& p);
// Never reads outside [data, data + size); rejects truncated, oversized,
// foreign-version or inconsistent blobs with a message.
Status deserialize(const void* data, size_t size, Params* out);
// Runtime-phase fields (what getFieldsToSerialize produced): finds the
// kStateFieldName kUNKNOWN field, deserializes it and checks it describes `op`.
Status params_from_serialized_fields(const OpInfo& op, const Field* fields, int32_t nb_fields, Params* out);

// --- type / format rules ------------------------------------------------------
bool is_supported_dtype(DType t);  // fp32, fp16, bf16
int32_t nb_inputs(const Params& p);  // 1, or 2 with bias
constexpr int32_t kNbOutputs = 1;

struct TensorTypeFormat {
  DType type;
  int32_t format;
};
// supportsFormatCombination: pos indexes inputs then outputs; every tensor is
// linear and has X's (supported) type. Decides from in_out[0..pos] only.
bool supports_format_combination(const Params& p, int32_t pos, const TensorTypeFormat* in_out,
                                 int32_t nb_in, int32_t nb_out);
// getOutputDataTypes: Y has X's type.
Status output_types(const Params& p, const DType* in_types, int32_t nb_in, DType* out_types,
                    int32_t nb_out);

// --- shape rules ----------------------------------------------------------------
// dims[i] < 0 means "not known yet" (build phase); known values are checked.
struct Shape {
  int32_t nb_dims;
  const int64_t* d;
};
// Y = X's shape; bias (if any) is 1-D with length = X's last dim; X has rank
// >= 1 when there is a bias. Unknown dims pass; known ones must agree.
Status check_shapes(const Params& p, const Shape* in, int32_t nb_in);

// --- dispatch -------------------------------------------------------------------
struct LaunchArgs {
  gelu_form_t form;
  gelu_dtype_t dtype;
  int64_t n;         // elements of X (and Y)
  int64_t bias_len;  // 0 without bias
  float alpha;
};
Status to_kernel_dtype(DType t, gelu_dtype_t* out);
// Concrete shapes (all dims >= 0) -> the arguments of gelu_cuda_launch.
// n == 0 (an empty tensor) means there is nothing to launch.
Status launch_args(const Params& p, DType type, const Shape* in, int32_t nb_in, LaunchArgs* out);

// Short description for TensorRT's engine inspector, e.g. "GeluSigmoid(alpha=1.702)".
std::string describe(const OpInfo& op, const Params& p);

}  // namespace gelu_trt
