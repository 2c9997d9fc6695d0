// Host emulation of the CUDA kernels (gelu_cuda_emu.cpp): link it instead of
// the CUDA build (gelu_cuda.cu) to run gelu_cuda_launch on the CPU (the stream
// is ignored; the call returns when y is written). Test-only: the tests
// compile it with -I plugins/common, where the kernel body and math are.
#pragma once
#include "gelu_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GELU_EMU_FORWARD = 0, GELU_EMU_REVERSE = 1, GELU_EMU_SHUFFLED = 2 };

// The order in which the emulated (block, thread) pairs run; seed: shuffled.
void gelu_cuda_emu_order(int order, unsigned seed);

// The grid: max_blocks caps the launch's block count in place of kMaxBlocks
// (<= 0: kMaxBlocks), so that small launches make several trips per block;
// blocks > 0 forces that many blocks, a grid the launch never picks (the
// kernel body must still be right). gelu_cuda_emu_grid(0, 0): as the device.
void gelu_cuda_emu_grid(int64_t max_blocks, int64_t blocks);

// The hardware approximations (ex2.approx, rcp.approx) return the exact value
// times (1 + end * their PTX ISA maximum relative error): end = -1, 0 or +1.
void gelu_cuda_emu_approx_end(int end);

// The next gelu_cuda_launch fails like a device launch does (GELU_ERR_CUDA,
// with text in gelu_cuda_last_error()): how error reporting is tested.
void gelu_cuda_emu_fail_next_launch(void);

#ifdef __cplusplus
}
#endif
