// Relative error of the fp16/bf16 kernels' float formulas (the _half ones in
// plugins/common/gelu_math.inc), before the final rounding, against a long
// double reference, over a strided sweep of all float inputs (normal results):
// the "fp16 / bf16" rows of docs/kernels.md, "Accuracy".
//   g++ -O2 -std=c++17 -ffp-contract=off -mfma -Iplugins/common scripts/half_formula_error.cpp -o /tmp/half_error
//   /tmp/half_error 61        # every 61st float bit pattern (~1 min a form)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gelu_simd_scalar.h"

namespace {
using namespace gelu_scalar;
constexpr float kAlpha = 1.702f;

long double t_of(int form, long double x) {
  if (form == 1) return 2 * sqrtl(2 / 3.14159265358979323846264338327950288L) * (x + 0.044715L * x * x * x);
  return static_cast<long double>(kAlpha) * x;
}

long double reference(int form, long double x) {
  if (form == 0) return x * 0.5L * erfcl(-x / sqrtl(2.0L));
  return x / (1 + expl(-t_of(form, x)));
}

float half_formula(int form, float x) {
  if (form == 0) return gelu_erf_half_v(x);
  if (form == 1) return gelu_tanh_half_v(x);
  return gelu_sigmoid_half_v(x, kAlpha);
}
}  // namespace

int main(int argc, char** argv) {
  const uint64_t step = argc > 1 ? strtoull(argv[1], nullptr, 10) : 61;
  const char* const names[] = {"erf", "tanh", "sigmoid"};
  for (int form = 0; form < 3; ++form) {
    double worst = 0, worst_x = 0, worst3 = 0, rest = 0, rest_x = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += step) {
      const uint32_t bits = static_cast<uint32_t>(u);
      float x;
      memcpy(&x, &bits, 4);
      if (!isfinite(x)) continue;
      const long double r = reference(form, x);
      if (fabsl(r) < 0x1p-126L || fabsl(r) > 0x1p127L) continue;  // normal results
      const double e = static_cast<double>(fabsl((half_formula(form, x) - r) / r));
      if (e > worst) worst = e, worst_x = x;
      if (fabsf(x) <= 3 && e > worst3) worst3 = e;
      // tanh/sigmoid: what remains after the rounding of t itself (3 * 2^-23 |t|).
      const double er = form ? e - 3 * 0x1p-23 * static_cast<double>(fabsl(t_of(form, x))) : e;
      if (er > rest) rest = er, rest_x = x;
    }
    printf("%-7s max %.3g (x = %.9g), abs(x) <= 3: %.3g, less 3*2^-23*abs(t): %.3g (x = %.9g)\n", names[form],
           worst, worst_x, worst3, rest, rest_x);
  }
  return 0;
}
