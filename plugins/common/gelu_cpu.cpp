// gelu_cpu_range: argument checks and run-time ISA dispatch.
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "gelu_cpu_paths.h"
#include "gelu_kernels.h"

namespace {
enum Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* const kIsaNames[] = {"scalar", "avx2", "avx512"};

int hardware_isa() {
#if defined(GELU_ONNX_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return kAvx2;
#endif
  return kScalar;
}

int isa_from_name(const char* s, int fallback) {
  if (!s) return fallback;
  for (int i = 0; i < 3; ++i)
    if (strcmp(s, kIsaNames[i]) == 0) return i;
  return fallback;
}

// The path in use: the best the CPU has, capped by GELU_ONNX_CPU_ISA.
std::atomic<int> g_isa{-1};

int current_isa() {
  int isa = g_isa.load(std::memory_order_relaxed);
  if (isa < 0) {
    const int hw = hardware_isa();
    const int want = isa_from_name(getenv("GELU_ONNX_CPU_ISA"), hw);
    isa = want < hw ? want : hw;
    g_isa.store(isa, std::memory_order_relaxed);
  }
  return isa;
}
// erf form: 0 = float (fast), 1 = double tail (precise); -1 = not read yet.
std::atomic<int> g_erf_precise{-1};

int erf_precise() {
  int m = g_erf_precise.load(std::memory_order_relaxed);
  if (m < 0) {
    const char* s = getenv("GELU_ONNX_ERF");
    m = (s && strcmp(s, "precise") == 0) ? 1 : 0;
    g_erf_precise.store(m, std::memory_order_relaxed);
  }
  return m;
}
}  // namespace

extern "C" {

int gelu_cpu_erf_precise(int mode) {
  if (mode == 0 || mode == 1) g_erf_precise.store(mode, std::memory_order_relaxed);
  return erf_precise();
}

const char* gelu_cpu_isa(void) { return kIsaNames[current_isa()]; }

const char* gelu_cpu_set_isa(const char* name) {
  const int hw = hardware_isa();
  const int want = isa_from_name(name, hw);
  g_isa.store(want < hw ? want : hw, std::memory_order_relaxed);
  return gelu_cpu_isa();
}

namespace {
gelu_status_t cpu_range(gelu_form_t form, gelu_dtype_t dtype, const void* x, const void* bias,
                        int64_t bias_len, void* y, int64_t begin, int64_t end, float alpha,
                        int stream) {
  if (form < GELU_FORM_ERF || form > GELU_FORM_SIGMOID) return GELU_ERR_BAD_FORM;
  if (dtype < GELU_DTYPE_F32 || dtype > GELU_DTYPE_BF16) return GELU_ERR_BAD_DTYPE;
  if (begin < 0 || end < begin) return GELU_ERR_BAD_ARG;
  if (bias && bias_len <= 0) return GELU_ERR_BAD_BIAS;
  if (end == begin) return GELU_OK;
  if (!x || !y) return GELU_ERR_BAD_ARG;
  const int f = (form == GELU_FORM_ERF && erf_precise()) ? 3 : static_cast<int>(form);  // 3: kFormErfPrecise
  switch (current_isa()) {
#if defined(GELU_ONNX_X86)
    case kAvx512:
      gelu_range_avx512(f, dtype, x, bias, bias_len, y, begin, end, alpha, stream);
      break;
    case kAvx2:
      gelu_range_avx2(f, dtype, x, bias, bias_len, y, begin, end, alpha, stream);
      break;
#endif
    default:
      gelu_range_scalar(f, dtype, x, bias, bias_len, y, begin, end, alpha, stream);
  }
  return GELU_OK;
}
}  // namespace

gelu_status_t gelu_cpu_range(gelu_form_t form, gelu_dtype_t dtype, const void* x, const void* bias,
                             int64_t bias_len, void* y, int64_t begin, int64_t end, float alpha) {
  return cpu_range(form, dtype, x, bias, bias_len, y, begin, end, alpha, 0);
}

gelu_status_t gelu_cpu_range_stream(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                                    const void* bias, int64_t bias_len, void* y, int64_t begin,
                                    int64_t end, float alpha) {
  return cpu_range(form, dtype, x, bias, bias_len, y, begin, end, alpha, 1);
}

}  // extern "C"
