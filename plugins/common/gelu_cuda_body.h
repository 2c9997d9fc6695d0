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

// The launch shape for n elements of VEC-element packs (shared by the device
// launch and the host emulation, so both walk the same grid).
GELU_HD inline int64_t grid_blocks(int64_t n, int vec) {
  const int64_t packs = n / vec + 1;  // + 1: the tail of < VEC elements
  const int64_t tile = static_cast<int64_t>(kThreads) * unroll_for(vec);
  const int64_t want = (packs + tile - 1) / tile;
  return want < kMaxBlocks ? want : kMaxBlocks;
}

// The 16-byte kernel needs x, y (and b) 16-byte aligned and each pack inside
// one bias row; otherwise the one-element kernel runs.
inline bool vec_ok(const void* x, const void* b, int64_t bias_len, const void* y, int vec) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return aligned(x) && aligned(y) && (!b || (aligned(b) && bias_len % vec == 0));
}

template <int FORM>
GELU_HD inline float apply(float v, float alpha) {
  if (FORM == GELU_FORM_ERF) return gelu_scalar::gelu_erf_v<false>(v);
  if (FORM == GELU_FORM_TANH) return gelu_scalar::gelu_tanh_v(v);
  return gelu_scalar::gelu_sigmoid_v(v, alpha);
}

// apply() where the fast-range formulas hold (the same bits there); sets slow
// for an element outside it (|x| > 12 for erf; |s| > 450 or a quotient below
// 2^-100 for tanh/sigmoid, whose denominator is in [1, 2^114]; NaN), whose
// result is then unused. fabsf: the tests take |.| as a free operand modifier.
template <int FORM>
GELU_HD inline float apply_inrange(float v, float alpha, bool& slow) {
  using namespace gelu_scalar;
  if (FORM == GELU_FORM_ERF) {
    slow |= !(fabsf(v) <= GELU_ERF_FAST_X);
    return gelu_erf_core<false, false>(v, vabs(v));
  }
  const float s = FORM == GELU_FORM_TANH ? gelu_tanh_s(v, vmul(v, v)) : gelu_sigmoid_s(v, alpha);
  const float y = gelu_xsig_mid<true>(v, s);
  slow |= !(fabsf(s) <= GELU_SIG_FAST_S) | !(fabsf(y) >= 0x1p-100f);
  return y;
}

// x (+ b) of one pack as floats.
template <bool BIAS, typename P>
GELU_HD inline void load_f32(const P& px, const P& pb, float* v) {
  gelu_cuda_io::to_f32v(px, v);
  if (BIAS) {
    float w[sizeof(px.v) / sizeof(px.v[0])];
    gelu_cuda_io::to_f32v(pb, w);
GELU_UNROLL
    for (size_t e = 0; e < sizeof(px.v) / sizeof(px.v[0]); ++e) v[e] += w[e];
  }
}

template <int FORM, typename T>
GELU_HD inline T one(T xv, const T* b, int64_t bi, float alpha) {
  float v = gelu_cuda_io::to_f32(xv);
  if (b) v += gelu_cuda_io::to_f32(b[bi]);
  return gelu_cuda_io::from_f32<T>(apply<FORM>(v, alpha));
}

// One thread's whole share of y = f(x + b[i % bias_len]).
//  * Full tiles of kThreads * kUnroll packs, grid-stride: pack k of a thread is
//    tile_start + k * kThreads + tid (each k coalesced across the warp); all
//    loads of a step are issued before its math.
//  * The bias offset of each of the kUnroll packs runs along with the tile
//    (+ step mod bias_len, one compare), 32-bit, no modulo per pack; BIAS with
//    VEC > 1 needs bias_len % VEC == 0 (each pack then sits in one bias row).
//    A bias row of 2^31 elements or more (8 GB of fp32; no model has one)
//    skips the tiles: the loop below takes every pack, a 64-bit modulo each.
//  * The remaining (< one tile per block) packs, then the < VEC tail elements.
template <int FORM, typename T, int VEC, bool BIAS>
GELU_HD inline void gelu_body(int64_t block, int64_t blocks, int tid, const T* __restrict__ x,
                              const T* __restrict__ b, int64_t bias_len, T* __restrict__ y,
                              int64_t n, float alpha) {
  using P = Pack<T, VEC>;
  constexpr int kUnroll = unroll_for(VEC);
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kUnroll;
  const P* xp = reinterpret_cast<const P*>(x);
  P* yp = reinterpret_cast<P*>(y);
  const int64_t packs = n / VEC;
  const int64_t full = !BIAS || bias_len <= INT32_MAX ? packs / kTile : 0;
  // Offsets and step < bias_len <= 2^31 - 1: their sum fits 32 bits.
  uint32_t boff[kUnroll] = {}, bstep = 0;
  const uint32_t blen = static_cast<uint32_t>(bias_len);
  if (BIAS && block < full) {
    for (int k = 0; k < kUnroll; ++k)
      boff[k] = static_cast<uint32_t>(((block * kTile + k * kThreads + tid) * VEC) % bias_len);
    bstep = static_cast<uint32_t>((blocks * kTile * VEC) % bias_len);
  }
  for (int64_t t = block; t < full; t += blocks) {
    const int64_t p0 = t * kTile + tid;
    P px[kUnroll], pb[kUnroll];
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) px[k] = gelu_cuda_io::ld_stream(xp + p0 + k * kThreads);
    if (BIAS) {
GELU_UNROLL
      for (int k = 0; k < kUnroll; ++k) pb[k] = gelu_cuda_io::ld_keep(reinterpret_cast<const P*>(b + boff[k]));
    }
    // The step's kUnroll * VEC elements through the in-range formulas, one
    // flag for all of them; a step with any element out of range (rare)
    // recomputes them all with the exact formulas. Both give the same bits
    // wherever the in-range formulas apply.
    float v[kUnroll][VEC];
    bool slow = false;
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) {
      load_f32<BIAS>(px[k], pb[k], v[k]);
GELU_UNROLL
      for (int e = 0; e < VEC; ++e) v[k][e] = apply_inrange<FORM>(v[k][e], alpha, slow);
    }
    if (slow) {
GELU_UNROLL
      for (int k = 0; k < kUnroll; ++k) {
        load_f32<BIAS>(px[k], pb[k], v[k]);
GELU_UNROLL
        for (int e = 0; e < VEC; ++e) v[k][e] = apply<FORM>(v[k][e], alpha);
      }
    }
GELU_UNROLL
    for (int k = 0; k < kUnroll; ++k) {
      P py;
      gelu_cuda_io::from_f32v(v[k], py);
      gelu_cuda_io::st_stream(yp + p0 + k * kThreads, py);
      if (BIAS) {
        boff[k] += bstep;
        if (boff[k] >= blen) boff[k] -= blen;
      }
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
