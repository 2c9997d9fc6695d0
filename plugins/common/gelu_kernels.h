// C ABI of the shared GELU kernels. Used by the ONNX Runtime custom-op
// library, the TensorRT plugin, and (through ctypes) the Python tests.
//
//   y[i] = f(x[i] + bias[i % bias_len])     (bias == NULL: no bias)
//   f = erf:     0.5 * v * (1 + erf(v / sqrt(2)))
//       tanh:    0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 v^3)))
//       sigmoid: v * sigmoid(alpha * v)
// fp16/bf16 are loaded, computed in fp32, and rounded once on store.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GELU_FORM_ERF = 0, GELU_FORM_TANH = 1, GELU_FORM_SIGMOID = 2 } gelu_form_t;
typedef enum { GELU_DTYPE_F32 = 0, GELU_DTYPE_F16 = 1, GELU_DTYPE_BF16 = 2 } gelu_dtype_t;

typedef enum {
  GELU_OK = 0,
  GELU_ERR_BAD_FORM = 1,
  GELU_ERR_BAD_DTYPE = 2,
  GELU_ERR_BAD_BIAS = 3,   // bias_len <= 0 with bias != NULL, or n % bias_len != 0
  GELU_ERR_BAD_ARG = 4,    // NULL pointers with n > 0, n < 0
  GELU_ERR_CUDA = 5,       // a CUDA launch failed (text: gelu_cuda_last_error())
  GELU_ERR_NO_CUDA = 6,    // library built without CUDA
} gelu_status_t;

// CPU: computes elements [begin, end) of the flat tensor (so any thread pool
// can split the work); bias indexing is by the global element index.
// Dispatches at run time to AVX-512, AVX2+FMA or scalar code.
gelu_status_t gelu_cpu_range(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                             const void* bias, int64_t bias_len, void* y,
                             int64_t begin, int64_t end, float alpha);

// gelu_cpu_range with non-temporal stores for y (they bypass the caches; the
// results are bit-identical). For outputs much larger than the last-level
// cache: an ordinary store first reads each output line (read-for-ownership),
// so a memory-bound GELU moves 12 bytes per fp32 element instead of 8
// (measured on 2-core Zen 3, 64 MB fp32: ~1.8x). Slower when y would have
// stayed in cache for its consumer. Paths without such stores (scalar), and
// stretches of y that are not vector-aligned, use ordinary stores.
gelu_status_t gelu_cpu_range_stream(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                                    const void* bias, int64_t bias_len, void* y,
                                    int64_t begin, int64_t end, float alpha);

// Which CPU path gelu_cpu_range uses on this machine: "avx512", "avx2", "scalar".
// GELU_ONNX_CPU_ISA=scalar|avx2|avx512 in the environment caps it (for tests).
const char* gelu_cpu_isa(void);

// Caps the CPU path for this process ("scalar", "avx2", "avx512"; NULL or an
// unknown name = the best the CPU has) and returns the path now in use.
const char* gelu_cpu_set_isa(const char* name);

// CPU erf form: 0 = all-float math (default, <= 6.5 ulp in fp32), 1 = the
// tail rational and final products in double (<= 1.5 ulp, ~half the
// throughput on AVX2). Any other value only queries. Returns the mode in use.
// GELU_ONNX_ERF=precise in the environment selects 1 at start-up. The CUDA
// kernels use the all-float variant (mode 0's bits).
int gelu_cpu_erf_precise(int mode);

// CUDA: enqueues the whole tensor on `stream` (a cudaStream_t; NULL = default).
// The math is the CPU kernels' default (all-float erf): the same bits.
gelu_status_t gelu_cuda_launch(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                               const void* bias, int64_t bias_len, void* y, int64_t n,
                               float alpha, void* stream);

// After gelu_cuda_launch returned GELU_ERR_CUDA (or GELU_ERR_NO_CUDA): what
// went wrong, for the user ("cudaErrorNoKernelImageForDevice: no kernel image
// is available for execution on the device"). Per thread; "" if nothing failed.
const char* gelu_cuda_last_error(void);

#ifdef __cplusplus
}
#endif
