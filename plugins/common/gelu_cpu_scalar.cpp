// Portable scalar path (any x86-64 or other CPU); also the reference the
// vector paths are tested against.
#include "gelu_cpu_paths.h"
#include "gelu_simd_scalar.h"

namespace gelu_scalar {
inline vf vload_f32(const void* p) { float v; memcpy(&v, p, 4); return v; }
inline vf vload_f16(const void* p) { uint16_t h; memcpy(&h, p, 2); return f16_to_f32(h); }
inline vf vload_bf16(const void* p) { uint16_t h; memcpy(&h, p, 2); return bf16_to_f32(h); }
inline void vstore_f32(void* p, vf v) { memcpy(p, &v, 4); }
inline void vstore_f16(void* p, vf v) { const uint16_t h = f32_to_f16(v); memcpy(p, &h, 2); }
inline void vstore_bf16(void* p, vf v) { const uint16_t h = f32_to_bf16(v); memcpy(p, &h, 2); }
// No non-temporal stores on this path (the stream flag is ignored).
constexpr bool kHasStream = false;
inline void vstream_f32(void* p, vf v) { vstore_f32(p, v); }
inline void vstream_f16(void* p, vf v) { vstore_f16(p, v); }
inline void vstream_bf16(void* p, vf v) { vstore_bf16(p, v); }
inline void vstream_fence() {}
#include "gelu_cpu_loop.inc"
}  // namespace gelu_scalar

void gelu_range_scalar(GELU_RANGE_ARGS) {
  gelu_scalar::gelu_range_impl(form, dtype, x, bias, bias_len, y, begin, end, alpha, stream);
}
