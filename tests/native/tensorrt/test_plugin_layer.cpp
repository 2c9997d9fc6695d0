// Drives the TensorRT-facing layer through the real TensorRT interfaces
// (NvInferRuntime.h), the way the builder and runtime call it, without a GPU:
// creators from getCreators(), createPlugin in both phases, the capability
// interfaces, type / format / shape callbacks, the serialization round trip,
// clone / attachToContext, and registration. enqueue (the CUDA launch) is
// covered by tests/test_tensorrt.py on a machine with TensorRT and a GPU.
// Built only when TensorRT is found; exit 0 when every check passes.
#include <NvInferRuntime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "gelu_contract.h"
#include "gelu_trt_core.h"
#include "plugin_test_util.h"

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);
extern "C" int32_t gelu_onnx_trt_register_creators() noexcept;

using namespace nvinfer1;

namespace {

using plugin_test::build_plugin;
using plugin_test::dims;
using plugin_test::PluginPtr;

IPluginV3OneCore* core(IPluginV3* p) {
  return static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
}
IPluginV3OneBuild* build(IPluginV3* p) {
  return static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
}
IPluginV3OneRuntime* runtime(IPluginV3* p) {
  return static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}

DynamicPluginTensorDesc dyn(Dims d, DataType t, Dims mn, Dims mx) {
  DynamicPluginTensorDesc r{};
  r.desc.dims = d;
  r.desc.type = t;
  r.desc.format = TensorFormat::kLINEAR;
  r.desc.scale = -1.0f;
  r.min = mn;
  r.opt = mx;
  r.max = mx;
  return r;
}

PluginTensorDesc desc(Dims d, DataType t) {
  PluginTensorDesc r{};
  r.dims = d;
  r.type = t;
  r.format = TensorFormat::kLINEAR;
  r.scale = -1.0f;
  return r;
}

std::vector<uint8_t> state_of(IPluginV3* p) {
  const PluginFieldCollection* fc = runtime(p)->getFieldsToSerialize();
  if (fc == nullptr || fc->nbFields != 1 || fc->fields[0].type != PluginFieldType::kUNKNOWN) return {};
  const auto* b = static_cast<const uint8_t*>(fc->fields[0].data);
  return std::vector<uint8_t>(b, b + fc->fields[0].length);
}

void exercise(IPluginCreatorV3One* creator) {
  const gelu_trt::OpInfo* op = gelu_trt::find_op(creator->getPluginName());
  CHECK(op != nullptr);
  if (op == nullptr) return;
  const bool sigmoid = op->form == gelu_trt::Form::kSigmoid;
  const int32_t nin = op->bias ? 2 : 1;

  // getFieldNames: what the ONNX parser will look for on the node
  const PluginFieldCollection* names = creator->getFieldNames();
  CHECK(names != nullptr && names->nbFields == (sigmoid ? 1 : 0));
  if (sigmoid && names && names->nbFields == 1) {
    CHECK(std::strcmp(names->fields[0].name, GELU_ONNX_ATTR_ALPHA) == 0);
    CHECK(names->fields[0].type == PluginFieldType::kFLOAT32);
  }

  // kBUILD with the fields exactly as the parser builds them (FLOAT -> kFLOAT32, length 1)
  PluginPtr p = build_plugin(creator, sigmoid, 1.5f, "layer0");
  CHECK(p != nullptr);
  if (!p) return;
  CHECK(std::string(p->getInterfaceInfo().kind) == "PLUGIN");
  CHECK(core(p.get()) && build(p.get()) && runtime(p.get()));
  CHECK(std::string(core(p.get())->getInterfaceInfo().kind) == "PLUGIN_V3ONE_CORE");
  CHECK(std::string(build(p.get())->getInterfaceInfo().kind) == "PLUGIN_V3ONE_BUILD");
  CHECK(std::string(runtime(p.get())->getInterfaceInfo().kind) == "PLUGIN_V3ONE_RUNTIME");
  CHECK(std::strcmp(core(p.get())->getPluginName(), creator->getPluginName()) == 0);
  CHECK(std::strcmp(core(p.get())->getPluginVersion(), GELU_ONNX_OPSET_VERSION_STR) == 0);
  CHECK(std::strcmp(core(p.get())->getPluginNamespace(), creator->getPluginNamespace()) == 0);

  IPluginV3OneBuild* b = build(p.get());
  CHECK(b->getNbOutputs() == 1);
  const std::string meta = b->getMetadataString() ? b->getMetadataString() : "";
  CHECK(meta.find(op->op_type) == 0);
  CHECK(sigmoid == (meta.find("alpha=1.5") != std::string::npos));

  for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16}) {
    DataType in_t[2] = {t, t};
    DataType out_t = DataType::kINT8;
    CHECK(b->getOutputDataTypes(&out_t, 1, in_t, nin) == 0 && out_t == t);

    std::vector<DynamicPluginTensorDesc> io;
    io.push_back(dyn(dims({-1, 8}), t, dims({1, 8}), dims({64, 8})));
    if (op->bias) io.push_back(dyn(dims({8}), t, dims({8}), dims({8})));
    io.push_back(dyn(dims({-1, 8}), t, dims({1, 8}), dims({64, 8})));
    for (int32_t pos = 0; pos < nin + 1; ++pos) CHECK(b->supportsFormatCombination(pos, io.data(), nin, 1));
    CHECK(b->configurePlugin(io.data(), nin, io.data() + nin, 1) == 0);
    CHECK(b->getWorkspaceSize(io.data(), nin, io.data() + nin, 1) == 0);
    io[0].desc.format = TensorFormat::kCHW32;
    CHECK(!b->supportsFormatCombination(0, io.data(), nin, 1));
    io[0].desc.format = TensorFormat::kLINEAR;
    io[nin].desc.type = t == DataType::kFLOAT ? DataType::kHALF : DataType::kFLOAT;
    CHECK(!b->supportsFormatCombination(nin, io.data(), nin, 1));
    if (op->bias) {
      io[nin].desc.type = t;
      io[1] = dyn(dims({7}), t, dims({7}), dims({7}));  // bias length != last dim
      CHECK(b->configurePlugin(io.data(), nin, io.data() + nin, 1) != 0);
    }

    IPluginV3OneRuntime* r = runtime(p.get());
    std::vector<PluginTensorDesc> in, out;
    in.push_back(desc(dims({4, 8}), t));
    if (op->bias) in.push_back(desc(dims({8}), t));
    out.push_back(desc(dims({4, 8}), t));
    CHECK(r->onShapeChange(in.data(), nin, out.data(), 1) == 0);
    if (op->bias) {
      in[1] = desc(dims({6}), t);
      CHECK(r->onShapeChange(in.data(), nin, out.data(), 1) != 0);
    }
  }
  for (DataType t : {DataType::kINT8, DataType::kINT32, DataType::kINT64, DataType::kBOOL}) {
    DataType in_t[2] = {t, t};
    DataType out_t;
    CHECK(b->getOutputDataTypes(&out_t, 1, in_t, nin) != 0);
    std::vector<DynamicPluginTensorDesc> io(nin + 1, dyn(dims({2, 8}), t, dims({2, 8}), dims({2, 8})));
    CHECK(!b->supportsFormatCombination(0, io.data(), nin, 1));
  }

  // serialization round trip: runtime-phase creation from getFieldsToSerialize
  const std::vector<uint8_t> blob = state_of(p.get());
  CHECK(blob.size() == gelu_trt::kStateSize);
  const PluginFieldCollection* ser = runtime(p.get())->getFieldsToSerialize();
  PluginPtr q(creator->createPlugin("layer0", ser, TensorRTPhase::kRUNTIME));
  CHECK(q != nullptr);
  if (q) {
    CHECK(state_of(q.get()) == blob);
    CHECK(std::strcmp(core(q.get())->getPluginNamespace(), creator->getPluginNamespace()) == 0);
  }
  gelu_trt::Params back;
  CHECK(gelu_trt::deserialize(blob.data(), blob.size(), &back).ok());
  CHECK(back.form == op->form && back.bias == op->bias && back.alpha == (sigmoid ? 1.5f : 0.0f));

  // clone and attachToContext copy the whole plugin
  PluginPtr c(p->clone());
  CHECK(c != nullptr && state_of(c.get()) == blob);
  PluginPtr a(runtime(p.get())->attachToContext(nullptr));
  CHECK(a != nullptr && state_of(a.get()) == blob && runtime(a.get()) != nullptr);

  // refused: truncated state, a state of another op, a bad build field
  PluginField bad_state(gelu_trt::kStateFieldName, blob.data(), PluginFieldType::kUNKNOWN, 5);
  PluginFieldCollection bad{1, &bad_state};
  CHECK(creator->createPlugin("layer0", &bad, TensorRTPhase::kRUNTIME) == nullptr);
  gelu_trt::Params other{op->form == gelu_trt::Form::kErf ? gelu_trt::Form::kTanh : gelu_trt::Form::kErf, op->bias, 0.0f};
  const auto other_blob = gelu_trt::serialize(other);
  PluginField other_f(gelu_trt::kStateFieldName, other_blob.data(), PluginFieldType::kUNKNOWN,
                      static_cast<int32_t>(other_blob.size()));
  PluginFieldCollection other_fc{1, &other_f};
  CHECK(creator->createPlugin("layer0", &other_fc, TensorRTPhase::kRUNTIME) == nullptr);
  const int32_t int_alpha = 2;
  PluginField int_f(GELU_ONNX_ATTR_ALPHA, &int_alpha, PluginFieldType::kINT32, 1);
  PluginFieldCollection int_fc{1, &int_f};
  CHECK(creator->createPlugin("layer0", &int_fc, TensorRTPhase::kBUILD) == nullptr);
}

}  // namespace

int main() {
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = getCreators(n);
  CHECK(creators != nullptr && n == 12);  // 6 op types x {"ai.gelu_onnx", ""}
  std::set<std::pair<std::string, std::string>> seen;
  for (int32_t i = 0; i < n; ++i) {
    IPluginCreatorInterface* ci = creators[i];
    CHECK(std::string(ci->getInterfaceInfo().kind) == "PLUGIN CREATOR_V3ONE");
    auto* c = static_cast<IPluginCreatorV3One*>(ci);
    const std::string ns = c->getPluginNamespace();
    CHECK(ns == GELU_ONNX_DOMAIN || ns.empty());
    CHECK(std::strcmp(c->getPluginVersion(), GELU_ONNX_OPSET_VERSION_STR) == 0);
    CHECK(seen.insert({c->getPluginName(), ns}).second);
    exercise(c);
  }
  CHECK(seen.size() == 12);

  const int32_t registered = gelu_onnx_trt_register_creators();
  if (registered >= 0) {  // -1: this libnvinfer has no plugin registry to talk to
    CHECK(registered == n);
    CHECK(gelu_onnx_trt_register_creators() == n);  // idempotent
    IPluginRegistry* reg = getPluginRegistry();
    for (int32_t i = 0; i < n; ++i) {
      auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
      CHECK(reg->getCreator(c->getPluginName(), c->getPluginVersion(), c->getPluginNamespace()) == creators[i]);
    }
  }
  return check_summary();
}
