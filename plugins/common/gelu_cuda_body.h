// The CUDA GELU kernel written once as __host__ __device__ code: gelu_cuda.cu
// runs it as the kernel, gelu_cuda_emu.cpp runs the same body on the host for
// every (block, thread) of the same grid (tests/test_cuda_emulation.py). The
// includer defines, in namespace gelu_cuda_io, for each element type T:
//   float to_f32(T); T from_f32<T>(float);
//   P ld_stream(const P*), P ld_keep(const P*), void st_stream(P*, P) for
//   P = Pack<T, VEC> (streaming = touched once; keep = the bias, reused);
//   void to_f32v(const Pack<T,V>&, float*) / from_f32v(const float*, Pack<T,V>&)
//   (the fp16/bf16 device versions convert two elements per instruction);
//   bool warp_any(bool): true in every lane of the warp if it is in any
//   (__any_sync on the device; the lane's own value on the host).
// The math: gelu_cuda_math.h (the device's own formulas, hardware
// approximations, branch-free) and, for the rare exact paths, gelu_math.inc.
#pragma once
#include <stdint.h>

#include "gelu_cuda_math.h"
#include "gelu_kernels.h"
#include "gelu_simd_scalar.h"

#if defined(__CUDA_ARCH__)  // the device pass (the host pass would warn)
#define GELU_UNROLL _Pragma("unroll")
#else
#define GELU_UNROLL
#endif

namespace gelu_cuda {

// VEC elements, aligned to their size: 16 bytes for the vector kernels, one
// element (no padding) for VEC == 1.
template <typename T, int VEC>
struct alignas(VEC * sizeof(T)) Pack {
  T v[VEC];
};

constexpr int kThreads = 256;  // per block
// Packs per thread per step, all loaded before the math: 2 x 16 bytes, or 8
// single elements. With <= 40 registers (6 blocks, 1536 threads per SM) that
// is 48 KB of loads in flight per SM, above the ~26 KB an H200 SM needs to
// cover its share of 4.8 TB/s x ~700 ns; the extra resident warps hide the
// math's latency (at 64 registers the fp32 tanh/sigmoid and fp16/bf16 erf
// kernels were predicted issue-bound below 0.90 of copy).
GELU_HD constexpr int unroll_for(int vec) { return vec == 1 ? 8 : 2; }
constexpr int kMinBlocksPerSm = 6;    // __launch_bounds__: <= 40 registers
// fp16/bf16 with a bias keep 16 bias floats in registers: 5 blocks (<= 48
// registers; at 40 the bf16 ones spilled).
template <typename T, bool BIAS>
constexpr int min_blocks_per_sm() { return sizeof(T) == 2 && BIAS ? 5 : kMinBlocksPerSm; }
// The grid the host emulation assumes (the device launch asks the device:
// SMs x resident blocks per SM): a 132-SM H100 with 6 blocks per SM.
constexpr int64_t kMaxBlocks = 132 * kMinBlocksPerSm;

GELU_HD inline int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    const int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

// The launch shape for n elements of VEC-element packs (shared by the device
// launch and the host emulation, so both walk the same grid). With a bias
// (bias_len > 0), a block that makes more than one trip over the tiles must
// find the same bias offsets on every trip: the grid's trip, blocks * tile
// elements, is then a multiple of bias_len (gelu_body loads the bias once).
// (max_blocks: the blocks the device keeps resident, one wave; the host
// emulation lowers it to make small launches take several trips.)
GELU_HD inline int64_t grid_blocks(int64_t n, int vec, int64_t bias_len = 0, int64_t max_blocks = kMaxBlocks) {
  const int64_t packs = n / vec + 1;  // + 1: the tail of < VEC elements
  const int64_t tile = static_cast<int64_t>(kThreads) * unroll_for(vec);
  const int64_t want = (packs + tile - 1) / tile;
  if (want <= max_blocks) return want;  // one trip per block
  if (bias_len <= 0) return max_blocks;
  const int64_t period = bias_len / gcd64(bias_len, tile * vec);  // blocks per bias-aligned trip
  if (period <= max_blocks) return max_blocks / period * period;
  const int64_t blocks = period < want ? period : want;  // bias-aligned, or one trip per block
  return blocks <= INT32_MAX ? blocks : max_blocks;      // (gelu_body: per-pack loop then)
}

// The 16-byte kernel needs x, y (and b) 16-byte aligned and each pack inside
// one bias row; otherwise the one-element kernel runs.
inline bool vec_ok(const void* x, const void* b, int64_t bias_len, const void* y, int vec) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return aligned(x) && aligned(y) && (!b || (aligned(b) && bias_len % vec == 0));
}

// HALF: fp16/bf16. The exact CPU formulas (gelu_math.inc): the rare paths.
template <int FORM, bool HALF>
GELU_HD inline float apply(float v, float alpha) {
  using namespace gelu_scalar;
  if (FORM == GELU_FORM_ERF) return HALF ? gelu_erf_half_v(v) : gelu_erf_v<false>(v);
  if (FORM == GELU_FORM_TANH) return HALF ? gelu_tanh_half_v(v) : gelu_tanh_v(v);
  return HALF ? gelu_sigmoid_half_v(v, alpha) : gelu_sigmoid_v(v, alpha);
}

// fp16 / bf16 (2-byte elements) take the _half formulas.
template <typename T>
struct IsHalf {
  static constexpr bool value = sizeof(T) == 2;
};

// x (+ the bias, as floats) of one pack as floats.
template <bool BIAS, int VEC, typename P>
GELU_HD inline void load_f32(const P& px, const float* bias, float* v) {
  gelu_cuda_io::to_f32v(px, v);
  if (BIAS) {
GELU_UNROLL
    for (int e = 0; e < VEC; ++e) v[e] = gelu_scalar::vadd(v[e], bias[e]);
  }
}

template <int FORM, typename T>
GELU_HD inline T one(T xv, const T* b, int64_t bi, float alpha, float ka, bool exact) {
  constexpr bool kHalf = IsHalf<T>::value;
  float v = gelu_cuda_io::to_f32(xv);
  if (b) v = gelu_scalar::vadd(v, gelu_cuda_io::to_f32(b[bi]));
  const bool slow = exact || gelu_cuda_math::needs_exact<FORM, kHalf>(v);
  return gelu_cuda_io::from_f32<T>(slow ? apply<FORM, kHalf>(v, alpha) : gelu_cuda_math::fast<FORM, kHalf>(v, ka));
}

// One thread's whole share of y = f(x + b[i % bias_len]).
//  * Full tiles of kThreads * kUnroll packs, grid-stride: pack k of a thread is
//    tile_start + k * kThreads + tid (each k coalesced across the warp); all
//    loads of a step are issued before its math.
//  * The math: gelu_cuda_math's fast formulas, branch-free for every input.
//    Two exceptions, both uniform: exact (the sigmoid form with
//    0 < |alpha| < 2^-50: a kernel of its own on the device) runs the CPU
//    formulas for every element; fp32 erf recomputes a warp's step with them when any element
//    of it is beyond |x| = 12 (warp_any: one vote per step, never divergent).
//  * The bias: grid_blocks makes each block's trip a multiple of bias_len
//    elements (or one trip per block), so a thread's kUnroll packs meet the
//    same bias values on every trip: loaded once, kept as floats. BIAS with
//    VEC > 1 needs bias_len % VEC == 0 (each pack then sits in one bias row).
//    Any other grid skips the tiles (correct, slow: the loop below).
//  * The remaining (< one tile per block) packs, then the < VEC tail elements.
template <int FORM, typename T, int VEC, bool BIAS>
GELU_HD inline void gelu_body(int64_t block, int64_t blocks, int tid, const T* __restrict__ x,
                              const T* __restrict__ b, int64_t bias_len, T* __restrict__ y,
                              int64_t n, float alpha, bool exact) {
  using P = Pack<T, VEC>;
  constexpr int kUnroll = unroll_for(VEC);
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kUnroll;
  constexpr bool kHalf = IsHalf<T>::value;
  constexpr bool kRare = FORM == GELU_FORM_ERF && !kHalf;  // fp32 erf only
  const float ka = gelu_cuda_math::sigmoid_ka(alpha);
  exact = FORM == GELU_FORM_SIGMOID && exact;
  const P* xp = reinterpret_cast<const P*>(x);
  P* yp = reinterpret_cast<P*>(y);
  const int64_t packs = n / VEC;
  int64_t full = packs / kTile;
  if (BIAS && blocks < full && (blocks * kTile * VEC) % bias_len != 0) full = 0;
  float bias[kUnroll][VEC] = {};
  if (BIAS && block < full) {
    // Offsets of the kUnroll packs: one modulo, then + kThreads * VEC (mod bias_len) each.
    int64_t off = ((block * kTile + tid) * VEC) % bias_len;
    const int64_t step = (static_cast<int64_t>(kThreads) * VEC) % bias_len;
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) {
      gelu_cuda_io::to_f32v(gelu_cuda_io::ld_keep(reinterpret_cast<const P*>(b + off)), bias[k]);
      off += step;
      if (off >= bias_len) off -= bias_len;
    }
  }
  for (int64_t t = block; t < full; t += blocks) {
    const int64_t p0 = t * kTile + tid;
    P px[kUnroll];
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) px[k] = gelu_cuda_io::ld_stream(xp + p0 + k * kThreads);
    float v[kUnroll][VEC];
    bool rare = false;
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) {
      load_f32<BIAS, VEC>(px[k], bias[k], v[k]);
GELU_UNROLL
      for (int e = 0; e < VEC; ++e) rare |= gelu_cuda_math::needs_exact<FORM, kHalf>(v[k][e]);
    }
    if (exact || (kRare && gelu_cuda_io::warp_any(rare))) {
GELU_UNROLL
      for (int k = 0; k < kUnroll; ++k)
GELU_UNROLL
        for (int e = 0; e < VEC; ++e) v[k][e] = apply<FORM, kHalf>(v[k][e], alpha);
    } else {
GELU_UNROLL
      for (int k = 0; k < kUnroll; ++k)
GELU_UNROLL
        for (int e = 0; e < VEC; ++e) v[k][e] = gelu_cuda_math::fast<FORM, kHalf>(v[k][e], ka);
    }
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) {
      P py;
      gelu_cuda_io::from_f32v(v[k], py);
      gelu_cuda_io::st_stream(yp + p0 + k * kThreads, py);
    }
  }
  // Cold: what the full tiles leave, spread over the whole grid.
  const int64_t gtid = block * kThreads + tid, gstride = blocks * kThreads;
  for (int64_t p = full * kTile + gtid; p < packs; p += gstride) {
    const P px = gelu_cuda_io::ld_stream(xp + p);
    P py;
GELU_UNROLL
    for (int e = 0; e < VEC; ++e) {
      const int64_t i = p * VEC + e;
      py.v[e] = one<FORM>(px.v[e], BIAS ? b : nullptr, BIAS ? i % bias_len : 0, alpha, ka, exact);
    }
    gelu_cuda_io::st_stream(yp + p, py);
  }
  if (VEC > 1) {
    for (int64_t i = packs * VEC + gtid; i < n; i += gstride)
      y[i] = one<FORM>(x[i], BIAS ? b : nullptr, BIAS ? i % bias_len : 0, alpha, ka, exact);
  }
}

}  // namespace gelu_cuda
