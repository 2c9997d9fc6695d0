// The CUDA kernels' own formulas (device only): built on the hardware's fast
// approximations where the accuracy contract still holds, branch-free over
// the whole float range. The CPU kernels keep gelu_math.inc; the CUDA path is
// no longer bit-identical to them, only within the same bounds
// (docs/kernels.md, "CUDA kernels").
//
// Primitives (device: one PTX instruction each; host: the exact function
// perturbed by the PTX ISA's documented maximum error, at the end chosen by
// gelu_cuda_approx_end(), so the host emulation checks the accuracy bound at
// both ends of what the hardware may return, not one particular chip). The
// figures, PTX ISA 9.1, section 9.7.3 "Floating Point Instructions":
//   ex2_approx(a)  ex2.approx.ftz.f32: 2^a, "maximum ulp error is 2 ulp from
//                  correctly rounded result": 2.5 ulp of the exact value,
//                  relative 2.5 * 2^-23 (subnormal results flushed to +0;
//                  -inf -> +0; NaN -> NaN)
//   rcp_approx(a)  rcp.approx.ftz.f32: 1/a, "maximum ulp error is 1": relative
//                  2^-23
// tanh.approx is not used: its relative error 2^-11 is ~2^-11 absolute where
// tanh(u) is near -1, which breaks 1 + tanh(u) for negative x; the
// x*sigmoid(2u) form below does not cancel.
//
// Formulas (x the float input, bias already added):
//  * tanh/sigmoid, fp16/bf16 (xsig_half): s = t*log2(e),
//      E64 = ex2(64 - |s|) = 2^64 e^-|t|     (0 past |t| ~ 131: ftz)
//      r = rcp(1 + E64*2^-64)                  = sigmoid(|t|)
//      y = x*r (t >= 0),  (x*r*E64)*2^-64 (t < 0: one rounding into the
//      subnormal range, so bf16's tiny results stay right)
//    relative error < 2^-18.9 (64 - |s| rounded: 2^-19.5; ex2 2^-21.7; rcp
//    2^-23; three roundings) + the rounding of s (|t| 2^-24): 2^6x inside
//    the 2^-12 that the final fp16/bf16 rounding leaves.
//  * the same in fp32 (xsig_f32), where the bounds are 3(1+|t|) (tanh) and
//    2(1+|t|) (sigmoid) ulp: E64 = 2^(64-a) from a degree-6 polynomial of 2^f
//    (relative error 9e-9: ex2.approx's 2.5 ulp would take more than the
//    sigmoid bound near t = 0) and the exponent bits (a = |s| up to 189;
//    past it t < 0 gives +-0), and one correctly rounded quotient: rcp, a
//    Newton step and a residual correction of N / (1 + E), N = x or x * E64
//    as an exact float pair.
//  * erf, fp16/bf16 (erf_half): Phi(-|x|) = e^(-x^2/2) R(|x|), R a (2,3)
//    rational (minimax, relative error 6.1e-5 = 2^-14 on [0, 16]; P scaled
//    by 2^-64), e^(-x^2/2) as ex2(64 - x^2 log2(e)/2) (|x| clamped at 16 for
//    R: the result there is 0 or x), y = max(x, -0) - |x| Phi(-|x|).
//  * erf, fp32: gelu_math.inc's all-float erf (gelu_erf_core) for |x| <= 12,
//    the exact CPU formula for a warp with any element beyond (rare and
//    warp-uniform: gelu_cuda_body.h).
// -inf gives -0 (x clamped to -FLT_MAX in the product), +inf gives +inf,
// NaN gives NaN, as the CPU kernels.
#pragma once
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "gelu_kernels.h"
#include "gelu_simd_scalar.h"

namespace gelu_cuda_math {
using gelu_scalar::vadd;
using gelu_scalar::vfma;
using gelu_scalar::vmul;
using gelu_scalar::vsub;

// PTX ISA maximum errors (f32), relative to the exact value: ex2.approx 2 ulp
// from the correctly rounded result, so 2.5 ulp (times 1 + 2^-23 for the
// ulp of a result rounded up to the next binade: 0x1.41p-22 covers it);
// rcp.approx 1 ulp.
constexpr double kEx2RelErr = 0x1.41p-22;
constexpr double kRcpRelErr = 0x1p-23;

#if !defined(__CUDA_ARCH__)
// Host emulation: -1 / +1 = the low / high end of each approximation's
// documented error, 0 = the exact value (rounded to float).
inline int& gelu_cuda_approx_end() {
  static int end = 0;
  return end;
}
// An approximation's model: NaN stays NaN; a subnormal input is +-0 (.ftz);
// the exact value of that input (exact(double)) moved to the chosen end of
// the relative error rel_err, rounded to float, a subnormal result +-0.
template <typename Exact>
inline float host_approx(float a, Exact exact, double rel_err) {
  if (a != a) return a;
  const double in = fabsf(a) < FLT_MIN ? copysign(0.0, a) : a;
  const float f = static_cast<float>(exact(in) * (1.0 + gelu_cuda_approx_end() * rel_err));
  return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
}
#endif

GELU_HD inline float ex2_approx(float a) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
#else
  return host_approx(a, [](double v) { return exp2(v); }, kEx2RelErr);
#endif
}

GELU_HD inline float rcp_approx(float a) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
#else
  return host_approx(a, [](double v) { return 1.0 / v; }, kRcpRelErr);
#endif
}

// s >= 0 ? a : b (NaN s: b), as one select: left to itself nvcc turned the
// last element's select into a short data-dependent branch.
GELU_HD inline float sel_nonneg(float s, float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("{\n\t.reg .pred p;\n\tsetp.ge.f32 p, %3, 0f00000000;\n\tselp.f32 %0, %1, %2, p;\n\t}"
      : "=f"(r) : "f"(a), "f"(b), "f"(s));
  return r;
#else
  return s >= 0.0f ? a : b;
#endif
}

// fminf/fmaxf: one FMNMX; a NaN operand gives the other one (callers say why
// that is safe).
GELU_HD inline float fmin_(float a, float b) { return fminf(a, b); }
GELU_HD inline float fmax_(float a, float b) { return fmaxf(a, b); }

// t*log2(e) of the tanh form (t = 2 sqrt(2/pi) (x + 0.044715 x^3)) and of the
// sigmoid form (t = alpha x; ka = alpha*log2(e), once per thread).
#define GELU_CUDA_TANH_K1 2.3022082f    // 2 sqrt(2/pi) log2(e)
#define GELU_CUDA_TANH_K3 0.10294324f   // the same times 0.044715
GELU_HD inline float tanh_s(float x) { return vmul(x, vfma(vmul(x, x), GELU_CUDA_TANH_K3, GELU_CUDA_TANH_K1)); }
GELU_HD inline float sigmoid_ka(float alpha) { return vmul(alpha, 1.4426950408889634f); }

// x*sigmoid(t) from s = t*log2(e), fp16/bf16 accuracy (see the top).
GELU_HD inline float xsig_half(float x, float s) {
  const float e64 = ex2_approx(vsub(64.0f, fabsf(s)));  // NaN stays NaN
  const float r = rcp_approx(vfma(e64, 0x1p-64f, 1.0f));
  const float xr = vmul(x, r);  // NaN x: r is NaN too
  // t < 0: x r finite for the product (x = -inf: -0, not -inf * 0; a NaN
  // x r comes with a NaN e64).
  return sel_nonneg(s, xr, vmul(vmul(fmin_(fmax_(xr, -FLT_MAX), FLT_MAX), e64), 0x1p-64f));
}

// 2^f for f in [-1/2, 1/2], relative error 9e-9.
GELU_HD inline float exp2_poly(float f) {
  float p = vfma(0.00015453163f, f, 0.0013390863f);
  p = vfma(p, f, 0.009618083f);
  p = vfma(p, f, 0.05550357f);
  p = vfma(p, f, 0.2402265f);
  p = vfma(p, f, 0.6931472f);
  return vfma(p, f, 1.0f);
}

// x*sigmoid(t) from s = t*log2(e), fp32 accuracy (see the top): one
// correctly rounded quotient N / (1 + E), N = x (t >= 0) or the exact product
// x * E64 (t < 0, as a float pair, scaled by 2^-64 at the end), so the error
// is the denominator's rounding, E's (9e-9) and half an ulp: as the CPU's.
GELU_HD inline float xsig_f32(float x, float s) {
  const float a = fabsf(s);
  const float na = -fmin_(a, 189.0f);  // NaN (x NaN) -> -189: x at the end
  // 64 + round(-a) in the low mantissa bits: the 2^64 goes into the exponent,
  // not into the argument (64 - a would round a off).
  const float j = vadd(na, GELU_MAGIC + 64.0f);
  const float f = vsub(na, vsub(j, GELU_MAGIC + 64.0f));     // [-1/2, 1/2], exact
  const float e64 = gelu_scalar::vldexp_j(exp2_poly(f), j);  // 2^(64 - a), a normal float
  const float den = vfma(e64, 0x1p-64f, 1.0f);                // 1 + e^-|t|
  float r = rcp_approx(den);
  r = vfma(r, vfma(-den, r, 1.0f), r);  // Newton: 1/den to about half an ulp
  const float xc = fmin_(fmax_(x, -FLT_MAX), FLT_MAX);  // finite (inf, NaN: fixed below)
  const float m = sel_nonneg(s, 1.0f, e64);
  const float nh = vmul(xc, m), nl = vfma(xc, m, -nh);  // x * m exactly
  const float q = vmul(nh, r);
  const float y = vfma(vadd(vfma(-den, q, nh), nl), r, q);
  // t < 0: times 2^-64 (one rounding into the subnormal range), and 0 past
  // a = 189 (where x * 2^-189 would be left).
  const float sc = sel_nonneg(s, 1.0f, a <= 189.0f ? 0x1p-64f : 0.0f);
  const float ys = vmul(y, sc);
  // t >= 0: x where it is +-inf (the limit), else ys; t < 0: ys (+-inf come
  // out of it as +-0: x clamped, sc = 0); NaN s (x NaN, or alpha x = 0 * inf):
  // s. Selects only (a && here became a data-dependent branch).
  return sel_nonneg(s, fabsf(x) > FLT_MAX ? x : ys, sel_nonneg(-s, ys, s));
}

// GELU erf form, fp16/bf16 accuracy (see the top).
GELU_HD inline float erf_half(float x) {
  const float ax = fmin_(fabsf(x), 16.0f);  // NaN -> 16: NaN comes back through e64
  const float e64 = ex2_approx(vfma(vmul(x, x), -0.72134752044448170f, 64.0f));
  // R = P / Q ~ e^(x^2/2) Phi(-x) (scripts/erf_half_rational.py), P times 2^-64.
  float p = vfma(0x1p-64f * 0.062518075f, ax, 0x1p-64f * 0.2782533f);
  p = vfma(p, ax, 0x1p-64f * 0.50001204f);
  float q = vfma(0.15653312f, ax, 0.70255995f);
  q = vfma(q, ax, 1.3551407f);
  q = vfma(q, ax, 1.0f);
  const float s = vmul(vmul(p, rcp_approx(q)), e64);  // Phi(-|x|)
  return vfma(-ax, s, fmax_(x, -0.0f));               // x - |x| s, or -|x| s
}

// One element, the fast formulas (FORM: gelu_form_t; HALF: fp16/bf16).
// ka: sigmoid_ka(alpha) for the sigmoid form.
template <int FORM, bool HALF>
GELU_HD inline float fast(float v, float ka) {
  if (FORM == GELU_FORM_ERF) return HALF ? erf_half(v) : gelu_scalar::gelu_erf_core<false, false>(v, fabsf(v));
  const float s = FORM == GELU_FORM_TANH ? tanh_s(v) : vmul(ka, v);
  return HALF ? xsig_half(v, s) : xsig_f32(v, s);
}

// Where fast() is not the formula: fp32 erf beyond |x| <= 12 (and NaN).
template <int FORM, bool HALF>
GELU_HD inline bool needs_exact(float v) {
  return FORM == GELU_FORM_ERF && !HALF && !(fabsf(v) <= GELU_ERF_FAST_X);
}

// The sigmoid form's fast formulas hold for alpha = 0 or |alpha| >= 2^-50
// (below, x*2^64 e^-|t| could overflow or E64 flush to 0 where x*e^-|t| is
// still a bf16/fp32 value): the launch runs the exact CPU formula otherwise.
inline bool sigmoid_alpha_fast(float alpha) { return alpha == 0.0f || fabsf(alpha) >= 0x1p-50f; }

}  // namespace gelu_cuda_math
