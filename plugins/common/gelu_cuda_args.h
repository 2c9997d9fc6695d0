// Argument checks of gelu_cuda_launch, shared by the CUDA build
// (gelu_cuda.cu) and the no-CUDA stub (gelu_cuda_stub.cpp) so that both
// answer every bad call alike. Returns a status to hand back as is, or
// GELU_OK with *empty telling whether there is any work (n == 0).
#pragma once
#include "gelu_kernels.h"

static inline gelu_status_t gelu_cuda_check_args(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                                                 const void* bias, int64_t bias_len, const void* y,
                                                 int64_t n, bool* empty) {
  *empty = false;
  if (form < GELU_FORM_ERF || form > GELU_FORM_SIGMOID) return GELU_ERR_BAD_FORM;
  if (dtype < GELU_DTYPE_F32 || dtype > GELU_DTYPE_BF16) return GELU_ERR_BAD_DTYPE;
  if (n < 0) return GELU_ERR_BAD_ARG;
  if (bias && (bias_len <= 0 || n % bias_len != 0)) return GELU_ERR_BAD_BIAS;
  if (n == 0) {
    *empty = true;
    return GELU_OK;
  }
  if (!x || !y) return GELU_ERR_BAD_ARG;
  return GELU_OK;
}
