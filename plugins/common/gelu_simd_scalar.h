// Scalar primitives for gelu_math.inc: the portable CPU fallback and, through
// __host__ __device__, the CUDA kernels (one algorithm, one rounding).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gelu_erf_coeffs.h"

#if defined(__CUDACC__)
#define GELU_HD __host__ __device__
#else
#define GELU_HD
#define GELU_COLD __attribute__((noinline, cold))
#define GELU_HOT __attribute__((always_inline))
#endif

namespace gelu_scalar {
typedef float vf;
typedef bool vm;
constexpr int kWidth = 1;

GELU_HD inline uint32_t fbits(float a) {
  uint32_t u;
  memcpy(&u, &a, sizeof u);
  return u;
}
GELU_HD inline float bitsf(uint32_t u) {
  float a;
  memcpy(&a, &u, sizeof a);
  return a;
}
GELU_HD inline vf vset(float a) { return a; }
// On the device, round-to-nearest intrinsics: never contracted into an FMA
// (whatever --fmad says) and IEEE division (whatever -prec-div / fast-math say),
// so the device computes the CPU kernels' bits under any of those flags.
#if defined(__CUDA_ARCH__)
GELU_HD inline vf vadd(vf a, vf b) { return __fadd_rn(a, b); }
GELU_HD inline vf vsub(vf a, vf b) { return __fsub_rn(a, b); }
GELU_HD inline vf vmul(vf a, vf b) { return __fmul_rn(a, b); }
GELU_HD inline vf vdiv(vf a, vf b) { return __fdiv_rn(a, b); }
#else
GELU_HD inline vf vadd(vf a, vf b) { return a + b; }
GELU_HD inline vf vsub(vf a, vf b) { return a - b; }
GELU_HD inline vf vmul(vf a, vf b) { return a * b; }
GELU_HD inline vf vdiv(vf a, vf b) { return a / b; }
#endif
GELU_HD inline vf vfma(vf a, vf b, vf c) { return fmaf(a, b, c); }
// a / b for operands and quotient well inside the normal range (callers say
// why): on the device, the fast path nvcc emits for an IEEE division without
// its range check (FCHK) and slow-path branch: a hardware reciprocal, one
// Newton step, the quotient and one residual correction, all FMAs, which give
// the correctly rounded quotient in that range; on the host, a / b.
GELU_HD inline vf vdiv_inrange(vf a, vf b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  r = __fmaf_rn(r, __fmaf_rn(-b, r, 1.0f), r);
  const float q = __fmaf_rn(a, r, 0.0f);
  return __fmaf_rn(r, __fmaf_rn(-b, q, a), q);
#else
  return a / b;
#endif
}
#define GELU_VDIV_INRANGE vdiv_inrange
GELU_HD inline vf vround(vf a) { return rintf(a); }  // nearest even (default mode)
// t * 2^(m >> 2) for m = bits(j) - MAGIC_BITS: (MAGIC_BITS >> 2) << 23 wraps to
// 0 in 32 bits and MAGIC_BITS is a multiple of 4, so this is floor(m/4) << 23.
GELU_HD inline vf vscale_m4(vf t, vf j) { return bitsf(fbits(t) + ((fbits(j) >> 2) << 23)); }
// Entry (bits(j) & 3) of a 4-entry table, as selects: an indexed local array
// would put the table on the GPU's stack (a local store + load per element).
GELU_HD inline vf vlut4(vf j, float t0, float t1, float t2, float t3) {
  const uint32_t i = fbits(j);
  const float lo = (i & 1u) ? t1 : t0, hi = (i & 1u) ? t3 : t2;
  return (i & 2u) ? hi : lo;
}
// Sign bit of x set ? a : b.
GELU_HD inline vf vsel_sign(vf x, vf a, vf b) { return (fbits(x) >> 31) ? a : b; }
// f * 2^k for k = bits(j) - MAGIC_BITS (f and the result normal floats).
GELU_HD inline vf vldexp_j(vf f, vf j) { return bitsf(fbits(f) + (fbits(j) << 23)); }
GELU_HD inline vf vabs(vf a) { return fabsf(a); }  // clears the sign bit (NaN too); a free operand modifier on the GPU
// Same NaN behaviour as x86 minps/maxps: the second operand wins.
GELU_HD inline vf vmin(vf a, vf b) { return a < b ? a : b; }
GELU_HD inline vf vmax(vf a, vf b) { return a > b ? a : b; }
GELU_HD inline vm vlt(vf a, vf b) { return a < b; }
GELU_HD inline vf vsel(vm m, vf a, vf b) { return m ? a : b; }
GELU_HD inline vf vfnma(vf a, vf b, vf c) { return fmaf(-a, b, c); }
GELU_HD inline vf vfms(vf a, vf b, vf c) { return fmaf(a, b, -c); }
GELU_HD inline vf vnegabs(vf a) { return bitsf(fbits(a) | 0x80000000u); }
GELU_HD inline vf vexp_bits(vf j, int32_t c) {
  return bitsf((fbits(j) + static_cast<uint32_t>(c)) << 23);
}
// |a| > lim (lim >= 0) or NaN.
GELU_HD inline vm vabs_gt(vf a, float lim) { return (fbits(a) & 0x7fffffffu) > fbits(lim); }
// a > lim or NaN, for a with a clear sign bit (lim >= 0).
GELU_HD inline vm vnonneg_gt(vf a, float lim) { return fbits(a) > fbits(lim); }
GELU_HD inline bool vany(vm m) { return m; }
GELU_HD inline double gelu_dset_(double v) { return v; }
GELU_HD inline vf vfrac_d(vf f, vf a, vf e) {
  const double ad = a;
  double p, q;
  GELU_R_EVAL(double, fma, gelu_dset_, ad, p, q);
  const double fd = f;
  return static_cast<float>(fma(fd, static_cast<double>(e), fd) * p / q);
}

#include "gelu_math.inc"

// IEEE half <-> float, round to nearest even, NaN kept quiet.
GELU_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // m * 2^-24, exact
    return bitsf(fbits(v) | sign);
  }
  if (e == 31) return bitsf(sign | 0x7f800000u | (m << 13));
  return bitsf(sign | ((e + 112u) << 23) | (m << 13));
}
GELU_HD inline uint16_t f32_to_f16(float f) {
  uint32_t x = fbits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t o;
  if (x >= 0x47800000u) {  // >= 65536, inf or NaN
    o = x > 0x7f800000u ? (0x7e00u | ((x >> 13) & 0x3ffu)) : 0x7c00u;
  } else if (x < 0x38800000u) {  // below 2^-14: subnormal half; the FP add rounds
    const float t = bitsf(x) + 0.5f;
    o = fbits(t) - 0x3f000000u;
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round half to even
    o = x >> 13;
  }
  return static_cast<uint16_t>(o | sign);
}
GELU_HD inline float bf16_to_f32(uint16_t h) { return bitsf(static_cast<uint32_t>(h) << 16); }
GELU_HD inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = fbits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
}  // namespace gelu_scalar
