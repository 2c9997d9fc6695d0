// The CUDA GELU kernel written once as __host__ __device__ code: gelu_cuda.cu
// runs it as the kernel, gelu_cuda_emu.cpp runs the same body on the host for
// every (block, thread) of the same grid (tests/test_cuda_emulation.py). The
// includer defines, in namespace gelu_cuda_io, for each element type T:
//   float to_f32(T); T from_f32<T>(float);
//   P ld_stream(const P*), P ld_keep(const P*), void st_stream(P*, P) for
//   P = Pack<T, VEC> (streaming = touched once; keep = the bias, reused);
//   void to_f32v(const Pack<T,V>&, float*) / from_f32v(const float*, Pack<T,V>&)
//   (the fp16/bf16 device versions convert two elements per instruction).
// The math is gelu_math.inc through the scalar primitives, float only (the
// erf form's all-float path), so the CPU kernels compute the same bits.
#pragma once
#include <stdint.h>

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
// Packs per thread per step, loaded before any math: 4 x 16 bytes, or 8
// single elements (the one-element kernel's per-step index work and range
// test then cover twice the elements).
GELU_HD constexpr int unroll_for(int vec) { return vec == 1 ? 8 : 4; }
constexpr int64_t kMaxBlocks = 4096;  // ~8 waves of 2048-thread SMs on a 132-SM H100

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
// (max_blocks: kMaxBlocks; the host emulation lowers it to make small
// launches take several trips.)
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

// HALF: fp16/bf16, the _half formulas (as the CPU kernels for those types).
template <int FORM, bool HALF>
GELU_HD inline float apply(float v, float alpha) {
  using namespace gelu_scalar;
  if (FORM == GELU_FORM_ERF) return HALF ? gelu_erf_half_v(v) : gelu_erf_v<false>(v);
  if (FORM == GELU_FORM_TANH) return HALF ? gelu_tanh_half_v(v) : gelu_tanh_v(v);
  return HALF ? gelu_sigmoid_half_v(v, alpha) : gelu_sigmoid_v(v, alpha);
}

// apply() where the fast-range formulas hold (the same bits there); sets slow
// for an element outside it (|x| > 12 for erf; |s| > 450 (|t| > 78) or a
// quotient below 2^-100 for tanh/sigmoid, whose denominator is in [1, 2^114];
// NaN), whose result is then unused. fabsf: the tests take |.| as a free
// operand modifier.
template <int FORM, bool HALF>
GELU_HD inline float apply_inrange(float v, float alpha, bool& slow) {
  using namespace gelu_scalar;
  if (FORM == GELU_FORM_ERF) {
    slow |= !(fabsf(v) <= GELU_ERF_FAST_X);
    return HALF ? gelu_erf_half_core(v, vabs(v)) : gelu_erf_core<false, false>(v, vabs(v));
  }
  float y;
  if (HALF) {
    const float s4 = FORM == GELU_FORM_TANH ? gelu_tanh_s4(v, vmul(v, v)) : gelu_sigmoid_s4(v, alpha);
    y = gelu_xsig_half_mid<true>(v, s4);
    slow |= !(fabsf(s4) <= GELU_SIG_HALF_FAST_S);
  } else {
    const float s = FORM == GELU_FORM_TANH ? gelu_tanh_s(v, vmul(v, v)) : gelu_sigmoid_s(v, alpha);
    y = gelu_xsig_mid<true>(v, s);
    slow |= !(fabsf(s) <= GELU_SIG_FAST_S);
  }
  slow |= !(fabsf(y) >= 0x1p-100f);
  return y;
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
GELU_HD inline T one(T xv, const T* b, int64_t bi, float alpha) {
  float v = gelu_cuda_io::to_f32(xv);
  if (b) v = gelu_scalar::vadd(v, gelu_cuda_io::to_f32(b[bi]));
  return gelu_cuda_io::from_f32<T>(apply<FORM, IsHalf<T>::value>(v, alpha));
}

// One thread's whole share of y = f(x + b[i % bias_len]).
//  * Full tiles of kThreads * kUnroll packs, grid-stride: pack k of a thread is
//    tile_start + k * kThreads + tid (each k coalesced across the warp); all
//    loads of a step are issued before its math.
//  * The bias: grid_blocks makes each block's trip a multiple of bias_len
//    elements (or one trip per block), so a thread's kUnroll packs meet the
//    same bias values on every trip: loaded once, kept as floats. BIAS with
//    VEC > 1 needs bias_len % VEC == 0 (each pack then sits in one bias row).
//    Any other grid skips the tiles (correct, slow: the loop below).
//  * The remaining (< one tile per block) packs, then the < VEC tail elements.
template <int FORM, typename T, int VEC, bool BIAS>
GELU_HD inline void gelu_body(int64_t block, int64_t blocks, int tid, const T* __restrict__ x,
                              const T* __restrict__ b, int64_t bias_len, T* __restrict__ y,
                              int64_t n, float alpha) {
  using P = Pack<T, VEC>;
  constexpr int kUnroll = unroll_for(VEC);
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kUnroll;
  constexpr bool kHalf = IsHalf<T>::value;
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
    // The step's kUnroll * VEC elements through the in-range formulas, one
    // flag for all of them; a step with any element out of range (rare)
    // recomputes them all with the exact formulas. Both give the same bits
    // wherever the in-range formulas apply.
    float v[kUnroll][VEC];
    bool slow = false;
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) {
      load_f32<BIAS, VEC>(px[k], bias[k], v[k]);
GELU_UNROLL
      for (int e = 0; e < VEC; ++e) v[k][e] = apply_inrange<FORM, kHalf>(v[k][e], alpha, slow);
    }
    if (slow) {
GELU_UNROLL
      for (int k = 0; k < kUnroll; ++k) {
        load_f32<BIAS, VEC>(px[k], bias[k], v[k]);
GELU_UNROLL
        for (int e = 0; e < VEC; ++e) v[k][e] = apply<FORM, kHalf>(v[k][e], alpha);
      }
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
      py.v[e] = one<FORM>(px.v[e], BIAS ? b : nullptr, BIAS ? i % bias_len : 0, alpha);
    }
    gelu_cuda_io::st_stream(yp + p, py);
  }
  if (VEC > 1) {
    for (int64_t i = packs * VEC + gtid; i < n; i += gstride)
      y[i] = one<FORM>(x[i], BIAS ? b : nullptr, BIAS ? i % bias_len : 0, alpha);
  }
}

}  // namespace gelu_cuda
