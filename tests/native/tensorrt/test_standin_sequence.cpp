// The plugin's IPluginV3 call sequence as TensorRT runs it, against the
// stand-in libnvinfer (standin/nvinfer_standin.cpp) and with enqueue going
// through the host emulation of the CUDA kernels (gelu_cuda_emu.cpp), so it
// runs without TensorRT and without a GPU:
//   IPluginRegistry::loadLibrary(plugin) -> getCreator -> createPlugin(kBUILD)
//   -> getOutputDataTypes / supportsFormatCombination / configurePlugin /
//   getWorkspaceSize -> getFieldsToSerialize -> createPlugin(kRUNTIME) from
//   the serialized fields -> attachToContext -> onShapeChange -> enqueue,
// for every op type x dtype, outputs checked against the accuracy contract
// (gelu_cuda_bound.h); a failed launch must reach the logger with the CUDA error's text.
//
//   test_standin_sequence PLUGIN.so sequence
//   test_standin_sequence PLUGIN.so alias-conflict   (prints what loadLibrary did)
#include <NvInferRuntime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "gelu_contract.h"
#include "gelu_kernels.h"
#include "gelu_simd_scalar.h"
#include "gelu_trt_core.h"
#include "gelu_cuda_bound.h"
#include "plugin_test_util.h"

extern "C" const char* nvinfer_standin_log() noexcept;

using namespace nvinfer1;

namespace {

using plugin_test::build_plugin;
using plugin_test::dims;
using plugin_test::PluginPtr;

template <typename T>
T* cap(IPluginV3* p, PluginCapabilityType t) {
  return static_cast<T*>(p->getCapabilityInterface(t));
}

struct Buffer {  // host memory: the emulated kernels read and write it directly
  std::vector<uint8_t> bytes;
  void fill(gelu_dtype_t dt, int64_t n, uint32_t seed) {
    const size_t es = dt == GELU_DTYPE_F32 ? 4 : 2;
    bytes.assign(static_cast<size_t>(n) * es + 16, 0);
    uint32_t s = seed;
    for (int64_t i = 0; i < n; ++i) {
      s = s * 1664525u + 1013904223u;
      const float v = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 12.0f;  // [-6, 6)
      if (dt == GELU_DTYPE_F32) {
        std::memcpy(&bytes[i * 4], &v, 4);
      } else {
        const uint16_t h = dt == GELU_DTYPE_F16 ? gelu_scalar::f32_to_f16(v) : gelu_scalar::f32_to_bf16(v);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  }
};

struct Case {
  DataType trt;
  gelu_dtype_t dt;
};

// One op type, one dtype, one shape: the whole sequence, then the bits.
void run_sequence(IPluginCreatorV3One* creator, const gelu_trt::OpInfo& op, Case c, int64_t rows, int64_t cols) {
  const bool sigmoid = op.form == gelu_trt::Form::kSigmoid;
  const int32_t nin = op.bias ? 2 : 1;
  const float alpha = 1.702f;

  // build phase
  PluginPtr p = build_plugin(creator, sigmoid, alpha, "gelu");
  CHECK(p != nullptr);
  if (!p) return;
  auto* b = cap<IPluginV3OneBuild>(p.get(), PluginCapabilityType::kBUILD);
  DataType in_t[2] = {c.trt, c.trt};
  DataType out_t = DataType::kINT8;
  CHECK(b->getOutputDataTypes(&out_t, 1, in_t, nin) == 0 && out_t == c.trt);
  std::vector<DynamicPluginTensorDesc> io(nin + 1);
  for (auto& d : io) {
    d.desc.type = c.trt;
    d.desc.format = TensorFormat::kLINEAR;
    d.desc.scale = -1.0f;
    d.desc.dims = d.min = d.opt = d.max = dims({rows, cols});
  }
  if (op.bias) io[1].desc.dims = io[1].min = io[1].opt = io[1].max = dims({cols});
  for (int32_t pos = 0; pos <= nin; ++pos) CHECK(b->supportsFormatCombination(pos, io.data(), nin, 1));
  CHECK(b->configurePlugin(io.data(), nin, io.data() + nin, 1) == 0);
  CHECK(b->getWorkspaceSize(io.data(), nin, io.data() + nin, 1) == 0);

  // serialization round trip: the engine keeps only these fields
  const PluginFieldCollection* ser = cap<IPluginV3OneRuntime>(p.get(), PluginCapabilityType::kRUNTIME)->getFieldsToSerialize();
  CHECK(ser != nullptr && ser->nbFields == 1);
  if (!ser) return;
  std::vector<uint8_t> blob(static_cast<const uint8_t*>(ser->fields[0].data),
                            static_cast<const uint8_t*>(ser->fields[0].data) + ser->fields[0].length);
  PluginField sf(ser->fields[0].name, blob.data(), ser->fields[0].type, static_cast<int32_t>(blob.size()));
  PluginFieldCollection sfc{1, &sf};
  p.reset();  // the build-phase plugin is gone before the runtime one exists

  // runtime phase
  PluginPtr q(creator->createPlugin("gelu", &sfc, TensorRTPhase::kRUNTIME));
  CHECK(q != nullptr);
  if (!q) return;
  PluginPtr r(cap<IPluginV3OneRuntime>(q.get(), PluginCapabilityType::kRUNTIME)->attachToContext(nullptr));
  CHECK(r != nullptr);
  if (!r) return;
  auto* rt = cap<IPluginV3OneRuntime>(r.get(), PluginCapabilityType::kRUNTIME);
  std::vector<PluginTensorDesc> in(nin), out(1);
  for (auto* v : {&in, &out})
    for (auto& d : *v) {
      d.type = c.trt;
      d.format = TensorFormat::kLINEAR;
      d.scale = -1.0f;
      d.dims = dims({rows, cols});
    }
  if (op.bias) in[1].dims = dims({cols});
  CHECK(rt->onShapeChange(in.data(), nin, out.data(), 1) == 0);

  const int64_t n = rows * cols;
  Buffer x, bias, y;
  x.fill(c.dt, n, 7u + static_cast<uint32_t>(cols));
  bias.fill(c.dt, cols, 99u);
  y.fill(c.dt, n, 1u);  // garbage the kernel must overwrite
  // offset 2 bytes for fp16/bf16 (4 for fp32): misaligned pointers take the one-element kernel
  const size_t off = (rows % 2) ? (c.dt == GELU_DTYPE_F32 ? 4 : 2) : 0;
  const void* inputs[2] = {x.bytes.data(), bias.bytes.data()};
  void* outputs[1] = {y.bytes.data() + off};
  CHECK(rt->enqueue(in.data(), out.data(), inputs, outputs, nullptr, nullptr) == 0);
  // The CUDA kernels' own math (gelu_cuda_math.h): held to the accuracy
  // contract (gelu_cuda_bound.h), no longer to the CPU kernels' bits.
  const size_t es = c.dt == GELU_DTYPE_F32 ? 4 : 2;
  const auto value = [&](const uint8_t* p) {
    uint32_t u = 0;
    std::memcpy(&u, p, es);
    if (c.dt == GELU_DTYPE_F32) {
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    return c.dt == GELU_DTYPE_F16 ? gelu_bound::f16_value(static_cast<uint16_t>(u))
                                  : gelu_bound::bf16_value(static_cast<uint16_t>(u));
  };
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v = value(x.bytes.data() + i * es);
    if (op.bias) v += value(bias.bytes.data() + (i % cols) * es);
    uint32_t yb = 0;
    std::memcpy(&yb, y.bytes.data() + off + i * es, es);
    bad += gelu_bound::bound_ratio(static_cast<int>(op.form), static_cast<int>(c.dt), v, yb, sigmoid ? alpha : 1.0f) > 1.0;
  }
  CHECK(bad == 0);
  if (bad) std::fprintf(stderr, "  %s dtype %d [%lld, %lld]: %lld outputs outside the accuracy contract\n", op.op_type,
                        static_cast<int>(c.dt), static_cast<long long>(rows), static_cast<long long>(cols),
                        static_cast<long long>(bad));
}

struct Dummy : IPluginCreatorV3One {  // "another library's" creator of the same name
  AsciiChar const* getPluginName() const noexcept override { return "GeluErf"; }
  AsciiChar const* getPluginVersion() const noexcept override { return GELU_ONNX_OPSET_VERSION_STR; }
  AsciiChar const* getPluginNamespace() const noexcept override { return ""; }
  PluginFieldCollection const* getFieldNames() noexcept override { return &none; }
  IPluginV3* createPlugin(AsciiChar const*, PluginFieldCollection const*, TensorRTPhase) noexcept override {
    return nullptr;
  }
  PluginFieldCollection none{0, nullptr};
};

int alias_conflict(const char* lib) {
  static Dummy other;
  IPluginRegistry* reg = getPluginRegistry();
  CHECK(reg->registerCreator(other, ""));
  void* h = reg->loadLibrary(lib);
  std::printf("loadLibrary: %s\n", h ? "loaded" : "refused");
  std::printf("%s", nvinfer_standin_log());
  return check_summary();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PLUGIN.so sequence|alias-conflict\n", argv[0]);
    return 2;
  }
  if (std::strcmp(argv[2], "alias-conflict") == 0) return alias_conflict(argv[1]);

  IPluginRegistry* reg = getPluginRegistry();
  void* h = reg->loadLibrary(argv[1]);
  CHECK(h != nullptr);
  if (!h) {
    std::fprintf(stderr, "%s", nvinfer_standin_log());
    return check_summary();
  }
  int32_t n = 0;
  reg->getAllCreators(&n);
  CHECK(n == 12);  // 6 op types x {"ai.gelu_onnx", ""}
  CHECK(reg->loadLibrary(argv[1]) == nullptr);  // its creators are registered already: TensorRT refuses

  const Case cases[] = {{DataType::kFLOAT, GELU_DTYPE_F32}, {DataType::kHALF, GELU_DTYPE_F16},
                        {DataType::kBF16, GELU_DTYPE_BF16}};
  for (const gelu_trt::OpInfo& op : gelu_trt::op_table()) {
    for (const char* ns : {GELU_ONNX_DOMAIN, ""}) {
      auto* creator = static_cast<IPluginCreatorV3One*>(reg->getCreator(op.op_type, GELU_ONNX_OPSET_VERSION_STR, ns));
      CHECK(creator != nullptr);
      if (!creator) continue;
      for (const Case& c : cases) {
        for (auto shape : {std::pair<int64_t, int64_t>{4, 64}, {5, 37}, {3, 1}, {1, 1000}}) {
          run_sequence(creator, op, c, shape.first, shape.second);
        }
      }
    }
  }

  // A launch that fails: the CUDA error's text reaches TensorRT's logger, and enqueue says it failed.
  void* self = dlopen(argv[1], RTLD_LAZY | RTLD_NOLOAD);
  auto fail_next = self ? reinterpret_cast<void (*)()>(dlsym(self, "gelu_cuda_emu_fail_next_launch")) : nullptr;
  CHECK(fail_next != nullptr);
  auto* creator = static_cast<IPluginCreatorV3One*>(reg->getCreator("GeluErf", GELU_ONNX_OPSET_VERSION_STR, GELU_ONNX_DOMAIN));
  PluginFieldCollection none{0, nullptr};
  PluginPtr p(creator ? creator->createPlugin("gelu", &none, TensorRTPhase::kBUILD) : nullptr);
  if (fail_next && p) {
    auto* rt = cap<IPluginV3OneRuntime>(p.get(), PluginCapabilityType::kRUNTIME);
    PluginTensorDesc d{};
    d.type = DataType::kFLOAT;
    d.format = TensorFormat::kLINEAR;
    d.dims = dims({2, 4});
    CHECK(rt->onShapeChange(&d, 1, &d, 1) == 0);
    float xv[8] = {0}, yv[8] = {0};
    const void* ins[1] = {xv};
    void* outs[1] = {yv};
    fail_next();
    CHECK(rt->enqueue(&d, &d, ins, outs, nullptr, nullptr) != 0);
    const std::string log = nvinfer_standin_log();
    CHECK(log.find("GeluErf::enqueue") != std::string::npos);
    CHECK(log.find("too many resources requested for launch") != std::string::npos);
  }
  p.reset();
  if (self) dlclose(self);

  reg->deregisterLibrary(h);
  reg->getAllCreators(&n);
  CHECK(n == 0);
  return check_summary();
}
