// gelu_cuda_launch for builds without CUDA: a clear status, never a crash.
#include "gelu_kernels.h"

extern "C" gelu_status_t gelu_cuda_launch(gelu_form_t, gelu_dtype_t, const void*, const void*,
                                          int64_t, void*, int64_t, float, void*) {
  return GELU_ERR_NO_CUDA;
}
