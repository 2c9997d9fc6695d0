// libgelu_onnx_trt_autoreg.so registers every creator while it is being loaded
// (what `trtexec --staticPlugins` and `polygraphy --plugins` rely on) and does
// not export getCreators (so IPluginRegistry::loadLibrary cannot register the
// same creators a second time). Exit 0 when both hold.
#include <NvInferRuntime.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "gelu_contract.h"
#include "gelu_trt_core.h"

extern "C" int32_t gelu_onnx_trt_register_creators() noexcept;

int main() {
  int failures = 0;
  nvinfer1::IPluginRegistry* reg = getPluginRegistry();
  if (reg == nullptr) {
    std::printf("no plugin registry in this libnvinfer: nothing to check\n");
    return 0;
  }
  // Before this program calls anything: the library's initializer did it.
  for (const char* ns : {GELU_ONNX_DOMAIN, ""}) {
    for (const gelu_trt::OpInfo& op : gelu_trt::op_table()) {
      if (reg->getCreator(op.op_type, GELU_ONNX_OPSET_VERSION_STR, ns) == nullptr) {
        std::fprintf(stderr, "FAIL: %s::%s not registered at load time\n", ns, op.op_type);
        ++failures;
      }
    }
  }
  if (dlsym(RTLD_DEFAULT, "getCreators") != nullptr) {
    std::fprintf(stderr, "FAIL: the auto-registering library exports getCreators\n");
    ++failures;
  }
  const int32_t n = gelu_onnx_trt_register_creators();  // idempotent: all 12 already there
  if (n != 12) {
    std::fprintf(stderr, "FAIL: gelu_onnx_trt_register_creators() returned %d, expected 12\n", n);
    ++failures;
  }
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
