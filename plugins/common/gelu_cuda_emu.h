// Host emulation of the CUDA kernels (gelu_cuda_emu.cpp): link the
// gelu_cuda_emu target instead of the CUDA build to run gelu_cuda_launch on
// the CPU (the stream is ignored; the call returns when y is written).
#pragma once
#include "gelu_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GELU_EMU_FORWARD = 0, GELU_EMU_REVERSE = 1, GELU_EMU_SHUFFLED = 2 };

// The order in which the emulated (block, thread) pairs run; seed: shuffled.
void gelu_cuda_emu_order(int order, unsigned seed);

// The next gelu_cuda_launch fails like a device launch does (GELU_ERR_CUDA,
// with text in gelu_cuda_last_error()): how error reporting is tested.
void gelu_cuda_emu_fail_next_launch(void);

#ifdef __cplusplus
}
#endif
