// ONNX Runtime custom-op library for the gelu-onnx op contract
// (plugins/common/gelu_contract.h): domain ai.gelu_onnx, op types
// GeluErf/GeluTanh/GeluSigmoid and Bias* variants, each registered for
// float, float16 and bfloat16 on the CPU EP and, when built with CUDA, on the
// CUDA EP.
//
// Written against the plain C API (no C++ wrapper globals) and negotiated at
// load time: RegisterCustomOps asks for the newest API this file knows
// (ORT_API_VERSION of the headers it was built with), capped by the version of
// the running onnxruntime, with API 16 (onnxruntime 1.16) as the floor.
// Features from newer APIs are used only when present:
//   >= 17: output shape inference, ORT's intra-op thread pool (ParallelFor).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "gelu_contract.h"
#include "gelu_kernels.h"
#include "gelu_ort_pool.h"
#include "onnxruntime_c_api.h"

namespace {

constexpr uint32_t kMinApi = 16;        // onnxruntime 1.16
constexpr uint32_t kApiParallelFor = 17;
constexpr int64_t kStreamBytes = int64_t{32} << 20;
constexpr uint32_t kApiShapeInfer = 17;
// Work is split into chunks of this many elements (24 for a 512x768
// activation): fine enough that ORT's pool rebalances when a thread is
// descheduled, coarse enough that scheduling stays negligible.
constexpr int64_t kChunk = 1 << 14;

uint32_t g_api_version = 0;
const OrtApi* g_api = nullptr;

struct OpDef {
  OrtCustomOp base;  // first member: ORT hands back &base
  const char* name;
  gelu_form_t form;
  bool bias;
  ONNXTensorElementDataType type;
  gelu_dtype_t dtype;
  const char* ep;  // nullptr = CPU
};

struct Kernel {
  const OpDef* op;
  float alpha;
};

const OpDef* def_of(const OrtCustomOp* op) { return reinterpret_cast<const OpDef*>(op); }

const char* dtype_name(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    default: return "a non-float type";
  }
}

OrtStatus* error(const OpDef* op, const std::string& msg, OrtErrorCode code = ORT_INVALID_ARGUMENT) {
  const std::string full = std::string(GELU_ONNX_DOMAIN ".") + op->name + ": " + msg;
  return g_api->CreateStatus(code, full.c_str());
}

std::string shape_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Type and shape of a tensor value; returns a status on failure.
OrtStatus* describe(const OrtValue* v, ONNXTensorElementDataType* type, std::vector<int64_t>* dims) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  OrtStatus* st = g_api->GetTensorTypeAndShape(v, &info);
  if (st) return st;
  size_t n = 0;
  if (!(st = g_api->GetTensorElementType(info, type)) && !(st = g_api->GetDimensionsCount(info, &n))) {
    dims->assign(n, 0);
    st = g_api->GetDimensions(info, dims->data(), n);
  }
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

// Read-only data of an input (the C API has only the mutable getter).
OrtStatus* tensor_data(const OrtValue* v, const void** out) {
  void* p = nullptr;
  OrtStatus* st = g_api->GetTensorMutableData(const_cast<OrtValue*>(v), &p);
  *out = p;
  return st;
}

// ---- OrtCustomOp callbacks --------------------------------------------------
const char* ORT_API_CALL GetName(const OrtCustomOp* op) { return def_of(op)->name; }
const char* ORT_API_CALL GetEp(const OrtCustomOp* op) { return def_of(op)->ep; }
ONNXTensorElementDataType ORT_API_CALL GetType(const OrtCustomOp* op, size_t) { return def_of(op)->type; }
size_t ORT_API_CALL GetInputCount(const OrtCustomOp* op) { return def_of(op)->bias ? 2 : 1; }
size_t ORT_API_CALL GetOutputCount(const OrtCustomOp*) { return 1; }
OrtCustomOpInputOutputCharacteristic ORT_API_CALL GetCharacteristic(const OrtCustomOp*, size_t) {
  return INPUT_OUTPUT_REQUIRED;
}
OrtMemType ORT_API_CALL GetInputMemoryType(const OrtCustomOp*, size_t) { return OrtMemTypeDefault; }
int ORT_API_CALL GetZero(const OrtCustomOp*) { return 0; }
int ORT_API_CALL GetOne(const OrtCustomOp*) { return 1; }

OrtStatus* ORT_API_CALL CreateKernelV2(const OrtCustomOp* op, const OrtApi* api,
                                       const OrtKernelInfo* info, void** out) {
  const OpDef* def = def_of(op);
  float alpha = GELU_ONNX_QUICK_GELU_ALPHA;
  if (def->form == GELU_FORM_SIGMOID) {
    float a = 0.0f;
    if (OrtStatus* st = api->KernelInfoGetAttribute_float(info, GELU_ONNX_ATTR_ALPHA, &a)) {
      api->ReleaseStatus(st);  // absent: the contract's default
    } else {
      alpha = a;
    }
    if (!isfinite(alpha))
      return error(def, "attribute alpha must be a finite float");
  }
  *out = new Kernel{def, alpha};
  return nullptr;
}

void* ORT_API_CALL CreateKernelV1(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  void* k = nullptr;
  if (OrtStatus* st = CreateKernelV2(op, api, info, &k)) {
    api->ReleaseStatus(st);
    k = new Kernel{def_of(op), GELU_ONNX_QUICK_GELU_ALPHA};
  }
  return k;
}

void ORT_API_CALL KernelDestroy(void* k) { delete static_cast<Kernel*>(k); }

struct Job {
  gelu_form_t form;
  gelu_dtype_t dtype;
  const void* x;
  const void* b;
  int64_t bias_len;
  void* y;
  int64_t n, chunk;
  float alpha;
  bool stream;  // non-temporal stores for y (outputs far larger than the caches)
};

void run_chunk(void* p, size_t i) {
  const Job* j = static_cast<const Job*>(p);
  const int64_t begin = static_cast<int64_t>(i) * j->chunk;
  const int64_t end = begin + j->chunk < j->n ? begin + j->chunk : j->n;
  (j->stream ? gelu_cpu_range_stream : gelu_cpu_range)(j->form, j->dtype, j->x, j->b, j->bias_len, j->y,
                                                      begin, end, j->alpha);
}

OrtStatus* ORT_API_CALL KernelComputeV2(void* kp, OrtKernelContext* ctx) {
  const Kernel* k = static_cast<const Kernel*>(kp);
  const OpDef* def = k->op;
  const OrtApi* api = g_api;
  OrtStatus* st = nullptr;

  const OrtValue* xv = nullptr;
  if ((st = api->KernelContext_GetInput(ctx, 0, &xv))) return st;
  if (!xv) return error(def, "input X is missing");
  ONNXTensorElementDataType xt;
  std::vector<int64_t> xd;
  if ((st = describe(xv, &xt, &xd))) return st;
  if (xt != def->type)
    return error(def, std::string("X is ") + dtype_name(xt) + ", this kernel takes " + dtype_name(def->type));
  int64_t n = 1;
  for (int64_t d : xd) n *= d;

  const void* bias = nullptr;
  int64_t bias_len = 0;
  if (def->bias) {
    const OrtValue* bv = nullptr;
    if ((st = api->KernelContext_GetInput(ctx, 1, &bv))) return st;
    if (!bv) return error(def, "input bias is missing");
    ONNXTensorElementDataType bt;
    std::vector<int64_t> bd;
    if ((st = describe(bv, &bt, &bd))) return st;
    if (bt != def->type)
      return error(def, std::string("bias is ") + dtype_name(bt) + " but X is " + dtype_name(def->type));
    if (xd.empty()) return error(def, "X is a scalar; a bias needs X of rank >= 1");
    if (bd.size() != 1 || bd[0] != xd.back())
      return error(def, "bias has shape " + shape_str(bd) + " but X has shape " + shape_str(xd) +
                            "; bias must be 1-D with length = X's last dimension (" +
                            std::to_string(xd.back()) + ")");
    bias_len = bd[0];
    if (n > 0 && (st = tensor_data(bv, &bias))) return st;
  }

  OrtValue* yv = nullptr;
  if ((st = api->KernelContext_GetOutput(ctx, 0, xd.data(), xd.size(), &yv))) return st;
  if (n == 0) return nullptr;  // zero-size tensor: nothing to compute
  const void* x = nullptr;
  void* y = nullptr;
  if ((st = tensor_data(xv, &x)) || (st = api->GetTensorMutableData(yv, &y))) return st;

  if (def->ep) {  // CUDA EP: enqueue on ORT's compute stream
    void* stream = nullptr;
    if ((st = api->KernelContext_GetGPUComputeStream(ctx, &stream))) return st;
    const gelu_status_t rc = gelu_cuda_launch(def->form, def->dtype, x, bias, bias_len, y, n, k->alpha, stream);
    if (rc == GELU_ERR_CUDA || rc == GELU_ERR_NO_CUDA)  // the CUDA runtime's own words: actionable
      return error(def, std::string("CUDA kernel launch failed: ") + gelu_cuda_last_error(), ORT_EP_FAIL);
    if (rc != GELU_OK) return error(def, "CUDA kernel launch failed (gelu_status " + std::to_string(rc) + ")");
    return nullptr;
  }

  // Outputs of >= 32 MiB won't be read back from cache by the next op anyway:
  // streaming stores save the read-for-ownership of every output line
  // (~1.8x on a memory-bound 64 MB fp32 tensor; results bit-identical).
  const int64_t out_bytes = n * (def->dtype == GELU_DTYPE_F32 ? 4 : 2);
  Job job{def->form, def->dtype, x, bias, bias_len, y, n, kChunk, k->alpha, out_bytes >= kStreamBytes};
  const size_t chunks = static_cast<size_t>((n + kChunk - 1) / kChunk);
  if (chunks <= 1) {
    run_chunk(&job, 0);
  } else if (g_api_version >= kApiParallelFor) {
    if ((st = api->KernelContext_ParallelFor(ctx, run_chunk, chunks, 0, &job))) return st;
  } else {
    gelu_ort::pool_parallel_for(run_chunk, &job, chunks);
  }
  return nullptr;
}

// onnxruntime 1.16 calls this one (it takes KernelComputeV2 only from API 17
// on, measured): an error can only leave as an exception, which ORT catches
// and turns into a failed Run -- the same way its C++ custom-op API reports.
void ORT_API_CALL KernelComputeV1(void* kp, OrtKernelContext* ctx) {
  if (OrtStatus* st = KernelComputeV2(kp, ctx)) {
    const std::string msg = g_api->GetErrorMessage(st);
    g_api->ReleaseStatus(st);
    throw std::runtime_error(msg);
  }
}

// Output has X's type and shape. The API reports an unknown shape as rank 0,
// indistinguishable from a scalar: setting that would declare the output a
// scalar, and ORT then pre-allocates a {} output inside If/Loop bodies (found
// by tests/test_corpus.py: subgraph/loop-with-nested-if). So only a known rank is
// propagated; otherwise the output shape stays unknown.
OrtStatus* ORT_API_CALL InferOutputShape(const OrtCustomOp*, OrtShapeInferContext* ctx) {
  OrtTensorTypeAndShapeInfo* info = nullptr;  // owned by the context
  OrtStatus* st = g_api->ShapeInferContext_GetInputTypeShape(ctx, 0, &info);
  if (st) return st;
  size_t rank = 0;
  if ((st = g_api->GetDimensionsCount(info, &rank))) return st;
  if (rank == 0) return nullptr;
  // An unknown dimension without a symbolic name comes back as -1, and
  // SetOutputTypeShape would write it as the literal value -1 (ORT 1.31):
  // downstream Shape/Reshape inference then sees "-1" dims and fails (found
  // with a fused BERT: "Target shape may not have multiple -1 dimensions").
  // Such shapes are left unknown instead; the output type is still inferred.
  std::vector<int64_t> dims(rank);
  std::vector<const char*> syms(rank, nullptr);
  if ((st = g_api->GetDimensions(info, dims.data(), rank))) return st;
  if ((st = g_api->GetSymbolicDimensions(info, syms.data(), rank))) return st;
  for (size_t i = 0; i < rank; ++i)
    if (dims[i] < 0 && (!syms[i] || !syms[i][0])) return nullptr;
  return g_api->ShapeInferContext_SetOutputTypeShape(ctx, 0, info);
}

// ---- Op table ---------------------------------------------------------------
struct OpName {
  const char* name;
  gelu_form_t form;
  bool bias;
};
#define GELU_ORT_OP_ROW(name, form, bias) {name, form, bias},
const OpName kOps[] = {GELU_ONNX_FOR_EACH_OP(GELU_ORT_OP_ROW)};
#undef GELU_ORT_OP_ROW
const struct {
  ONNXTensorElementDataType type;
  gelu_dtype_t dtype;
} kTypes[] = {
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, GELU_DTYPE_F32},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, GELU_DTYPE_F16},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, GELU_DTYPE_BF16},
};
#if defined(GELU_ONNX_WITH_CUDA)
const char* const kEps[] = {nullptr, "CUDAExecutionProvider"};
#else
const char* const kEps[] = {nullptr};
#endif
constexpr size_t kNumDefs = sizeof(kOps) / sizeof(kOps[0]) * (sizeof(kTypes) / sizeof(kTypes[0])) *
                            (sizeof(kEps) / sizeof(kEps[0]));
OpDef g_defs[kNumDefs];

void fill_defs(uint32_t version) {
  size_t i = 0;
  for (const char* ep : kEps)
    for (const auto& t : kTypes)
      for (const auto& o : kOps) {
        OpDef& d = g_defs[i++];
        memset(&d, 0, sizeof d);
        d.name = o.name;
        d.form = o.form;
        d.bias = o.bias;
        d.type = t.type;
        d.dtype = t.dtype;
        d.ep = ep;
        OrtCustomOp& c = d.base;
        // ORT reads only the members that exist in API `version`.
        c.version = version;
        c.CreateKernel = CreateKernelV1;
        c.GetName = GetName;
        c.GetExecutionProviderType = GetEp;
        c.GetInputType = GetType;
        c.GetInputTypeCount = GetInputCount;
        c.GetOutputType = GetType;
        c.GetOutputTypeCount = GetOutputCount;
        c.KernelCompute = KernelComputeV1;
        c.KernelDestroy = KernelDestroy;
        c.GetInputCharacteristic = GetCharacteristic;
        c.GetOutputCharacteristic = GetCharacteristic;
        c.GetInputMemoryType = GetInputMemoryType;
        c.GetVariadicInputMinArity = GetOne;
        c.GetVariadicInputHomogeneity = GetOne;
        c.GetVariadicOutputMinArity = GetOne;
        c.GetVariadicOutputHomogeneity = GetOne;
        c.CreateKernelV2 = CreateKernelV2;
        c.KernelComputeV2 = KernelComputeV2;
        c.InferOutputShapeFn = version >= kApiShapeInfer ? InferOutputShape : nullptr;
        c.GetStartVersion = GetOne;  // op-set version 1 onwards
        c.GetEndVersion = nullptr;
        (void)GetZero;
      }
}

// "1.31.1" -> 31: onnxruntime 1.x serves C API versions 1..x.
uint32_t runtime_api_version(const OrtApiBase* base) {
  const char* v = base->GetVersionString ? base->GetVersionString() : nullptr;
  unsigned major = 0, minor = 0;
  if (!v || sscanf(v, "%u.%u", &major, &minor) != 2 || major != 1) return 0;
  return minor;
}

}  // namespace

extern "C" {

// The negotiated API version (0 before RegisterCustomOps); for tests.
__attribute__((visibility("default"))) uint32_t gelu_onnx_ort_api_version(void) { return g_api_version; }

__attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* base) {
  uint32_t want = runtime_api_version(base);
  if (want > ORT_API_VERSION) want = ORT_API_VERSION;
  const OrtApi* api = nullptr;
  if (want >= kMinApi) api = base->GetApi(want);
  if (!api) {
    // Unknown version string: probe downwards (GetApi returns NULL above its max).
    for (want = ORT_API_VERSION; !api && want >= kMinApi; --want) api = base->GetApi(want);
    ++want;
  }
  if (!api) {  // API 1 exists in every onnxruntime: enough to report the error
    const std::string msg = std::string("gelu_onnx_ort: onnxruntime ") +
                            (base->GetVersionString ? base->GetVersionString() : "?") +
                            " is too old; onnxruntime 1." + std::to_string(kMinApi) + " or newer is needed";
    const OrtApi* api1 = base->GetApi(1);
    return api1 ? api1->CreateStatus(ORT_FAIL, msg.c_str()) : nullptr;
  }
  if (g_api && g_api_version != want) {
    return api->CreateStatus(ORT_FAIL, "gelu_onnx_ort: already registered with another onnxruntime API version");
  }
  if (!g_api) {
    g_api = api;
    g_api_version = want;
    fill_defs(want);
  }
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* st = api->CreateCustomOpDomain(GELU_ONNX_DOMAIN, &domain)) return st;
  for (OpDef& d : g_defs) {
    if (OrtStatus* st = api->CustomOpDomain_Add(domain, &d.base)) {
      api->ReleaseCustomOpDomain(domain);
      return st;
    }
  }
  // The session options keep the domain; ORT requires it to outlive every
  // session made from them, so it is deliberately never released.
  return api->AddCustomOpDomain(options, domain);
}

}  // extern "C"
