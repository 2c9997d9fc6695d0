#include "gelu_trt_core.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "gelu_contract.h"

namespace gelu_trt {

const std::vector<OpInfo>& op_table() {
#define GELU_TRT_OP_ROW(name, form, bias) {name, static_cast<Form>(form), bias},
  static const std::vector<OpInfo> table = {GELU_ONNX_FOR_EACH_OP(GELU_TRT_OP_ROW)};
#undef GELU_TRT_OP_ROW
  return table;
}

const OpInfo* find_op(std::string_view op_type) {
  for (const OpInfo& op : op_table()) {
    if (op_type == op.op_type) return &op;
  }
  return nullptr;
}

std::vector<FieldSpec> advertised_fields(const OpInfo& op) {
  if (op.form == Form::kSigmoid) return {{GELU_ONNX_ATTR_ALPHA, FieldType::kFLOAT32, 1}};
  return {};
}

const char* form_name(Form form) {
  switch (form) {
    case Form::kErf: return "erf";
    case Form::kTanh: return "tanh";
    case Form::kSigmoid: return "sigmoid";
  }
  return "?";
}

namespace {

std::string str(float v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

// IEEE half -> float, for hand-built kFLOAT16 fields.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    mag = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign ? -mag : mag;
}

Status read_alpha(const Field& f, float* out) {
  if (f.length != 1) {
    return Status::Error("field 'alpha' must hold exactly one value, got " + std::to_string(f.length));
  }
  double v;
  switch (f.type) {
    case FieldType::kFLOAT32: {
      float x;
      std::memcpy(&x, f.data, sizeof x);
      v = x;
      break;
    }
    case FieldType::kFLOAT64: std::memcpy(&v, f.data, sizeof v); break;
    case FieldType::kFLOAT16: {
      uint16_t h;
      std::memcpy(&h, f.data, sizeof h);
      v = half_to_float(h);
      break;
    }
    default:
      return Status::Error("field 'alpha' must be a float (PluginFieldType kFLOAT32), got type " +
                           std::to_string(static_cast<int32_t>(f.type)) +
                           "; write the ONNX attribute as a FLOAT");
  }
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
    return Status::Error("field 'alpha' must be a finite float32, got " + std::to_string(v));
  }
  *out = static_cast<float>(v);
  return Status::Ok();
}

}  // namespace

Status params_from_fields(const OpInfo& op, const Field* fields, int32_t nb_fields, Params* out) {
  if (nb_fields < 0 || (nb_fields > 0 && fields == nullptr)) {
    return Status::Error("malformed plugin field collection");
  }
  Params p;
  p.form = op.form;
  p.bias = op.bias;
  p.alpha = op.form == Form::kSigmoid ? GELU_ONNX_QUICK_GELU_ALPHA : 0.0f;
  bool seen_alpha = false;
  for (int32_t i = 0; i < nb_fields; ++i) {
    const Field& f = fields[i];
    if (f.name == nullptr) return Status::Error("plugin field " + std::to_string(i) + " has no name");
    if (f.length < 0 || (f.length > 0 && f.data == nullptr)) {
      return Status::Error(std::string("plugin field '") + f.name + "' has no data");
    }
    if (std::strcmp(f.name, GELU_ONNX_ATTR_ALPHA) != 0) continue;  // not ours: see header
    if (op.form != Form::kSigmoid) {
      return Status::Error(std::string("attribute 'alpha' is only valid for the sigmoid forms, not ") + op.op_type);
    }
    if (seen_alpha) return Status::Error("attribute 'alpha' given twice");
    seen_alpha = true;
    Status s = read_alpha(f, &p.alpha);
    if (!s.ok()) return s;
  }
  *out = p;
  return Status::Ok();
}

// --- serialization ---------------------------------------------------------------

namespace {
constexpr uint8_t kMagic[4] = {'G', 'E', 'L', 'U'};
constexpr uint8_t kFlagBias = 0x1;

uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
float bits_float(uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
}  // namespace

std::vector<uint8_t> serialize(const Params& p) {
  std::vector<uint8_t> b(kStateSize, 0);
  std::memcpy(b.data(), kMagic, 4);
  b[4] = static_cast<uint8_t>(kStateVersion & 0xff);
  b[5] = static_cast<uint8_t>(kStateVersion >> 8);
  b[6] = static_cast<uint8_t>(p.form);
  b[7] = p.bias ? kFlagBias : 0;
  const uint32_t a = float_bits(p.alpha);
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>((a >> (8 * i)) & 0xff);
  return b;
}

Status deserialize(const void* data, size_t size, Params* out) {
  if (data == nullptr) return Status::Error("serialized plugin state is missing");
  const auto* b = static_cast<const uint8_t*>(data);
  if (size < 6) return Status::Error("serialized plugin state is truncated (" + std::to_string(size) + " bytes)");
  if (std::memcmp(b, kMagic, 4) != 0) return Status::Error("serialized plugin state has a wrong magic (not a gelu-onnx plugin)");
  const uint16_t version = static_cast<uint16_t>(b[4] | (b[5] << 8));
  if (version != kStateVersion) {
    return Status::Error("serialized plugin state has format version " + std::to_string(version) +
                         "; this library reads version " + std::to_string(kStateVersion) +
                         " (rebuild the engine with this plugin)");
  }
  if (size != kStateSize) {
    return Status::Error("serialized plugin state has " + std::to_string(size) + " bytes, expected " +
                         std::to_string(kStateSize));
  }
  if (b[6] > static_cast<uint8_t>(Form::kSigmoid)) return Status::Error("serialized plugin state has an unknown form " + std::to_string(b[6]));
  if (b[7] & ~kFlagBias) return Status::Error("serialized plugin state has unknown flags");
  uint32_t a = 0;
  for (int i = 0; i < 4; ++i) a |= static_cast<uint32_t>(b[8 + i]) << (8 * i);
  Params p;
  p.form = static_cast<Form>(b[6]);
  p.bias = (b[7] & kFlagBias) != 0;
  p.alpha = bits_float(a);
  if (!std::isfinite(p.alpha)) return Status::Error("serialized plugin state has a non-finite alpha");
  if (p.form != Form::kSigmoid && p.alpha != 0.0f) return Status::Error("serialized plugin state has alpha for a non-sigmoid form");
  *out = p;
  return Status::Ok();
}

Status params_from_serialized_fields(const OpInfo& op, const Field* fields, int32_t nb_fields, Params* out) {
  if (nb_fields < 0 || (nb_fields > 0 && fields == nullptr)) {
    return Status::Error("malformed plugin field collection");
  }
  for (int32_t i = 0; i < nb_fields; ++i) {
    const Field& f = fields[i];
    if (f.name == nullptr || std::strcmp(f.name, kStateFieldName) != 0) continue;
    if (f.type != FieldType::kUNKNOWN || f.length < 0) {
      return Status::Error(std::string("field '") + kStateFieldName + "' must be raw bytes");
    }
    Params p;
    Status s = deserialize(f.data, static_cast<size_t>(f.length), &p);
    if (!s.ok()) return s;
    if (p.form != op.form || p.bias != op.bias) {
      return Status::Error(std::string("serialized plugin state is for form '") + form_name(p.form) + "'" +
                           (p.bias ? " with bias" : " without bias") + ", not for " + op.op_type);
    }
    *out = p;
    return Status::Ok();
  }
  return Status::Error(std::string("serialized plugin fields lack '") + kStateFieldName + "'");
}

// --- type / format rules ------------------------------------------------------

bool is_supported_dtype(DType t) { return t == DType::kFLOAT || t == DType::kHALF || t == DType::kBF16; }

int32_t nb_inputs(const Params& p) { return p.bias ? 2 : 1; }

bool supports_format_combination(const Params& p, int32_t pos, const TensorTypeFormat* in_out,
                                 int32_t nb_in, int32_t nb_out) {
  if (in_out == nullptr || nb_in != nb_inputs(p) || nb_out != kNbOutputs) return false;
  if (pos < 0 || pos >= nb_in + nb_out) return false;
  const TensorTypeFormat& t = in_out[pos];
  if (t.format != kFormatLinear) return false;
  if (pos == 0) return is_supported_dtype(t.type);
  return t.type == in_out[0].type;
}

Status output_types(const Params& p, const DType* in_types, int32_t nb_in, DType* out_types,
                    int32_t nb_out) {
  if (in_types == nullptr || out_types == nullptr || nb_in != nb_inputs(p) || nb_out != kNbOutputs) {
    return Status::Error("expected " + std::to_string(nb_inputs(p)) + " input(s) and 1 output");
  }
  if (!is_supported_dtype(in_types[0])) {
    return Status::Error("X must be float32, float16 or bfloat16 (TensorRT DataType " +
                         std::to_string(static_cast<int32_t>(in_types[0])) + " given)");
  }
  if (p.bias && in_types[1] != in_types[0]) return Status::Error("bias must have X's data type");
  out_types[0] = in_types[0];
  return Status::Ok();
}

// --- shape rules ----------------------------------------------------------------

Status check_shapes(const Params& p, const Shape* in, int32_t nb_in) {
  if (in == nullptr || nb_in != nb_inputs(p)) {
    return Status::Error("expected " + std::to_string(nb_inputs(p)) + " input(s), got " + std::to_string(nb_in));
  }
  const Shape& x = in[0];
  if (x.nb_dims < 0 || (x.nb_dims > 0 && x.d == nullptr)) return Status::Error("X has an invalid shape");
  if (!p.bias) return Status::Ok();
  const Shape& b = in[1];
  if (x.nb_dims < 1) return Status::Error("X must have rank >= 1 when a bias is given");
  if (b.nb_dims != 1 || b.d == nullptr) {
    return Status::Error("bias must be 1-D, got rank " + std::to_string(b.nb_dims));
  }
  const int64_t last = x.d[x.nb_dims - 1];
  const int64_t len = b.d[0];
  if (last >= 0 && len >= 0 && last != len) {
    return Status::Error("bias length " + std::to_string(len) + " differs from X's last dimension " +
                         std::to_string(last));
  }
  return Status::Ok();
}

// --- dispatch -------------------------------------------------------------------

Status to_kernel_dtype(DType t, gelu_dtype_t* out) {
  switch (t) {
    case DType::kFLOAT: *out = GELU_DTYPE_F32; return Status::Ok();
    case DType::kHALF: *out = GELU_DTYPE_F16; return Status::Ok();
    case DType::kBF16: *out = GELU_DTYPE_BF16; return Status::Ok();
    default: break;
  }
  return Status::Error("no GELU kernel for TensorRT DataType " + std::to_string(static_cast<int32_t>(t)));
}

Status launch_args(const Params& p, DType type, const Shape* in, int32_t nb_in, LaunchArgs* out) {
  Status s = check_shapes(p, in, nb_in);
  if (!s.ok()) return s;
  LaunchArgs a{};
  a.form = static_cast<gelu_form_t>(p.form);
  a.alpha = p.alpha;
  s = to_kernel_dtype(type, &a.dtype);
  if (!s.ok()) return s;
  int64_t n = 1;
  for (int32_t i = 0; i < in[0].nb_dims; ++i) {
    const int64_t d = in[0].d[i];
    if (d < 0) return Status::Error("X has an unresolved dimension at run time");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return Status::Error("X has more elements than int64 can count");
    n *= d;
  }
  a.n = n;
  a.bias_len = 0;
  if (p.bias) {
    a.bias_len = in[1].d[0];
    if (a.bias_len < 0) return Status::Error("bias has an unresolved dimension at run time");
    // check_shapes made bias_len == X's last dim, so bias_len == 0 means n == 0.
  }
  *out = a;
  return Status::Ok();
}

std::string describe(const OpInfo& op, const Params& p) {
  std::string s = op.op_type;
  if (p.form == Form::kSigmoid) s += "(alpha=" + str(p.alpha) + ")";
  return s;
}

}  // namespace gelu_trt
