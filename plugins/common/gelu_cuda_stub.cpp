// gelu_cuda_launch for builds without CUDA: the same argument checks as the
// CUDA build (so callers and tests see one behaviour), then a clear status,
// never a crash.
#include "gelu_kernels.h"

extern "C" gelu_status_t gelu_cuda_launch(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                                          const void* bias, int64_t bias_len, void* y, int64_t n,
                                          float, void*) {
  if (form < GELU_FORM_ERF || form > GELU_FORM_SIGMOID) return GELU_ERR_BAD_FORM;
  if (dtype < GELU_DTYPE_F32 || dtype > GELU_DTYPE_BF16) return GELU_ERR_BAD_DTYPE;
  if (n < 0) return GELU_ERR_BAD_ARG;
  if (bias && (bias_len <= 0 || n % bias_len != 0)) return GELU_ERR_BAD_BIAS;
  if (n == 0) return GELU_OK;
  if (!x || !y) return GELU_ERR_BAD_ARG;
  return GELU_ERR_NO_CUDA;
}
