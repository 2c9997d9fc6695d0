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
#include "gelu_cpu_loop.inc"
}  // namespace gelu_scalar

void gelu_range_scalar(int form, int dt, const void* x, const void* b, int64_t bl, void* y,
                       int64_t s, int64_t e, float a) {
  gelu_scalar::gelu_range_impl(form, dt, x, b, bl, y, s, e, a);
}
