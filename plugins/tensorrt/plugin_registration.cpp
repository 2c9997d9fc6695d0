// How TensorRT finds the creators. Two shared libraries are built from this file:
//
// * libgelu_onnx_trt.so exports getCreators / setLoggerFinder, the entry points
//   of IPluginRegistry::loadLibrary (`trtexec --dynamicPlugins`,
//   `--setPluginsToSerialize`, gelu_onnx.tensorrt.load_plugin). It registers
//   nothing by itself: loadLibrary fails if a creator it is about to register
//   already exists.
// * libgelu_onnx_trt_autoreg.so (GELU_ONNX_TRT_STATIC_REGISTRATION=1) registers
//   every creator from a static initializer when it is loaded, for loaders that
//   only dlopen (`trtexec --staticPlugins`, `polygraphy --plugins`, ctypes.CDLL)
//   and for programs that link it. It does not export getCreators, so it cannot
//   be registered twice. Unlike REGISTER_TENSORRT_PLUGIN (which always passes
//   ""), it registers each creator in its own namespace.
// Both export gelu_onnx_trt_register_creators(): explicit, idempotent.
//
// Namespaces. Each op type has a creator in "ai.gelu_onnx" (the node's domain)
// and, by default, an alias in "" (set GELU_ONNX_TRT_DEFAULT_NAMESPACE=0 to
// drop the aliases). The aliases exist because TensorRT's ONNX parser asks the
// registry for `plugin_namespace` (a node attribute, default "") when deciding
// whether a plugin should replace a model-local function (TensorRT 10.7-10.14,
// and >= 10.15 under kENABLE_PLUGIN_OVERRIDE); only its final fallback importer
// (>= 10.10) retries with the node's domain. A fused node that carries
// plugin_namespace="ai.gelu_onnx" is found without the aliases. Details and
// source references: README.md, "How the ONNX parser finds the plugin".
#include <NvInferRuntime.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gelu_contract.h"
#include "gelu_plugin.h"
#include "gelu_plugin_creator.h"

// TENSORRTAPI is empty outside TensorRT's own build, and this library is built
// with hidden visibility: export the entry points explicitly.
#if defined(_WIN32)
#define GELU_ONNX_TRT_API __declspec(dllexport)
#else
#define GELU_ONNX_TRT_API __attribute__((visibility("default")))
#endif

namespace {

bool default_namespace_aliases() {
  const char* v = std::getenv("GELU_ONNX_TRT_DEFAULT_NAMESPACE");
  return v == nullptr || !(std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0 || std::strcmp(v, "off") == 0);
}

struct CreatorSet {
  std::vector<std::unique_ptr<gelu_trt::GeluPluginCreator>> owned;
  std::vector<nvinfer1::IPluginCreatorInterface*> list;
};

const CreatorSet& creators() {
  static const CreatorSet set = [] {
    CreatorSet s;
    std::vector<const char*> namespaces = {GELU_ONNX_DOMAIN};
    if (default_namespace_aliases()) namespaces.push_back("");
    for (const char* ns : namespaces) {
      for (const gelu_trt::OpInfo& op : gelu_trt::op_table()) {
        s.owned.push_back(std::make_unique<gelu_trt::GeluPluginCreator>(op, ns));
        s.list.push_back(s.owned.back().get());
      }
    }
    return s;
  }();
  return set;
}

}  // namespace

#if !(defined(GELU_ONNX_TRT_STATIC_REGISTRATION) && GELU_ONNX_TRT_STATIC_REGISTRATION)
extern "C" GELU_ONNX_TRT_API void setLoggerFinder(nvinfer1::ILoggerFinder* finder) {
  gelu_trt::set_logger_finder(finder);
}

extern "C" GELU_ONNX_TRT_API nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) {
  try {
    const CreatorSet& s = creators();
    nbCreators = static_cast<int32_t>(s.list.size());
    return s.list.data();
  } catch (...) {
    nbCreators = 0;
    return nullptr;
  }
}
#endif

// Registers every creator with getPluginRegistry(), skipping any already there.
// Returns how many are registered afterwards, or -1 without a registry.
extern "C" GELU_ONNX_TRT_API int32_t gelu_onnx_trt_register_creators() noexcept {
  static std::mutex mu;
  try {
    std::lock_guard<std::mutex> lock(mu);
    nvinfer1::IPluginRegistry* registry = getPluginRegistry();
    if (registry == nullptr) return -1;
    int32_t registered = 0;
    for (const auto& c : creators().owned) {
      const bool present = registry->getCreator(c->getPluginName(), c->getPluginVersion(), c->getPluginNamespace()) != nullptr;
      if (present || registry->registerCreator(*c, c->getPluginNamespace())) {
        ++registered;
      } else {
        gelu_trt::log_error(std::string("could not register ") + c->getPluginNamespace() + "::" + c->getPluginName());
      }
    }
    return registered;
  } catch (...) {
    return -1;
  }
}

#if defined(GELU_ONNX_TRT_STATIC_REGISTRATION) && GELU_ONNX_TRT_STATIC_REGISTRATION
namespace {
struct StaticRegistrar {
  StaticRegistrar() { gelu_onnx_trt_register_creators(); }
} g_static_registrar;
}  // namespace
#endif
