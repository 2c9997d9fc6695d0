// The per-ISA CPU paths behind gelu_cpu_range (internal to gelu_kernels).
#pragma once
#include <stdint.h>

#include "gelu_kernels.h"

// stream != 0: write y with non-temporal stores where the path has them.
#define GELU_RANGE_ARGS                                                                 \
  int form, int dtype, const void *x, const void *bias, int64_t bias_len, void *y, \
      int64_t begin, int64_t end, float alpha, int stream

void gelu_range_scalar(GELU_RANGE_ARGS);
#if defined(__x86_64__) || defined(_M_X64)
#define GELU_ONNX_X86 1
void gelu_range_avx2(GELU_RANGE_ARGS);    // AVX2 + FMA + F16C
void gelu_range_avx512(GELU_RANGE_ARGS);  // AVX-512 F/BW/DQ/VL
#endif
