// A small fallback thread pool for ONNX Runtime < 1.17, whose custom-op API
// has no KernelContext_ParallelFor (ORT's own intra-op pool is used otherwise).
#pragma once
#include <stddef.h>

namespace gelu_ort {
// Runs fn(ctx, i) for i in [0, total), spread over min(total, workers + 1)
// threads (the caller works too). workers = hardware_concurrency() - 1, or
// GELU_ONNX_NUM_THREADS - 1 when that is set.
void pool_parallel_for(void (*fn)(void*, size_t), void* ctx, size_t total);
}  // namespace gelu_ort
