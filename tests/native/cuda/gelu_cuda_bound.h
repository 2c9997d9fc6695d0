// The CUDA kernels' accuracy contract (docs/kernels.md), checked against a
// long double reference, for the host emulations: the device formulas are
// not the CPU kernels' bits, so results are compared with the bound.
//  * fp32: erf <= 6.5 ulp, tanh <= 3 (1 + |t|) ulp, sigmoid <= 2 (1 + |t|) ulp
//    of the exact value (subnormal results: plus (3 + |v|) 2^-149);
//  * fp16 / bf16: the correctly rounded value or a neighbour one step away;
//  * NaN exactly where the reference is NaN; +-inf -> their limits (+inf or
//    +-0) exactly.
// v is the float the kernel computes from (x, or x + b rounded to float).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace gelu_bound {

// In double: ~1e-16 relative, 2^29 times finer than a float ulp.
inline long double reference(int form, float v, float alpha, long double* t_out) {
  const double x = v;
  double t = 0;
  double y;
  if (form == 0) {
    y = x * 0.5 * erfc(-x * 0.70710678118654752440);
  } else {
    t = form == 1 ? 1.5957691216057307117597842397375 * (x + 0.044715 * x * x * x) : static_cast<double>(alpha) * x;
    y = x / (1.0 + exp(-t));
  }
  // The limits at +-inf: x where t -> +inf (erf: x -> +inf), +-0 where
  // t -> -inf; NaN where alpha * x is (alpha = 0).
  if (isinf(v) && !isnan(t)) y = (form == 0 ? v > 0 : t > 0) ? x : copysign(0.0, x);
  *t_out = t;
  return y;
}

inline float f16_value(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f = e == 0 ? ldexpf(static_cast<float>(m), -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf(static_cast<float>(m | 0x400u), static_cast<int>(e) - 25);
  return (h & 0x8000u) ? -f : f;
}
inline float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// The value of the 16-bit pattern `ord` steps from +0 (negative: the negative
// side), as long double; past the infinities: +-inf.
inline long double half_at(int dt, int32_t ord) {
  const int32_t inf = dt == 1 ? 0x7c00 : 0x7f80;
  if (ord >= inf) return INFINITY;
  if (ord <= -inf) return -INFINITY;
  const uint16_t bits = static_cast<uint16_t>(ord < 0 ? (0x8000 | -ord) : ord);
  return dt == 1 ? f16_value(bits) : bf16_value(bits);
}

// Error in units of the bound (<= 1: inside it), or a huge number for a
// NaN/inf mismatch. dt: 0 fp32, 1 fp16, 2 bf16; y_bits: the stored element.
inline double bound_ratio(int form, int dt, float v, uint32_t y_bits, float alpha) {
  long double t;
  const long double ref = reference(form, v, alpha, &t);
  long double y;
  if (dt == 0) {
    float f;
    memcpy(&f, &y_bits, 4);
    y = f;
  } else {
    y = dt == 1 ? f16_value(static_cast<uint16_t>(y_bits)) : bf16_value(static_cast<uint16_t>(y_bits));
  }
  if (isnan(ref) || isnan(y)) return isnan(ref) && isnan(y) ? 0.0 : 1e30;
  if (isinf(v)) return y == ref ? 0.0 : 1e30;  // +inf -> +inf, -inf -> 0 exactly
  if (dt == 0) {
    if (isinf(ref) || isinf(y)) return ref == y ? 0.0 : 1e30;
    const long double aref = fabsl(ref);
    const double b = form == 0 ? 6.5 : (form == 1 ? 3.0 : 2.0) * (1.0 + static_cast<double>(fabsl(t)));
    const int e = aref >= 0x1p-126L ? ilogbl(aref) : -126;
    long double allowed = b * ldexpl(1.0L, e - 23);
    if (aref < 0x1p-126L) allowed += (3.0L + fabsl(static_cast<long double>(v))) * 0x1p-149L;
    return static_cast<double>(fabsl(y - ref) / allowed);
  }
  // fp16 / bf16: y's neighbours two steps out bound the inputs whose correct
  // rounding is y or one of its neighbours (inclusive: ties either way).
  const int32_t ord = (y_bits & 0x8000u) ? -static_cast<int32_t>(y_bits & 0x7fffu) : static_cast<int32_t>(y_bits & 0x7fffu);
  const long double lo = (half_at(dt, ord - 2) + half_at(dt, ord - 1)) / 2, hi = (half_at(dt, ord + 1) + half_at(dt, ord + 2)) / 2;
  if (ref >= lo && ref <= hi) return 0.0;
  return 1e30;
}

}  // namespace gelu_bound
