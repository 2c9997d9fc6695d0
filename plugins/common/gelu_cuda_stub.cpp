// gelu_cuda_launch for builds without CUDA: the same argument checks as the
// CUDA build (so callers and tests see one behaviour), then a clear status,
// never a crash.
#include "gelu_cuda_args.h"

extern "C" gelu_status_t gelu_cuda_launch(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                                          const void* bias, int64_t bias_len, void* y, int64_t n,
                                          float, void*) {
  bool empty;
  const gelu_status_t st = gelu_cuda_check_args(form, dtype, x, bias, bias_len, y, n, &empty);
  return st != GELU_OK || empty ? st : GELU_ERR_NO_CUDA;
}

extern "C" const char* gelu_cuda_last_error(void) {
  return "gelu-onnx was built without CUDA (no working nvcc at build time; see the build log)";
}
