// Timing probe behind docs/kernels.md "Why no single mode does both": would a
// table-driven float erf kernel (the only all-float design found that could
// reach <= 2 ulp) fit the speed budget of the default mode? Timing only: the
// table entries are placeholders, the results are not checked.
//
//   g++ -O3 -std=c++17 -mavx2 -mfma -mf16c -Iplugins/common scripts/erf_table_probe.cpp -o /tmp/probe
//   /tmp/probe
//
// The table design: R(a) = C_i * e^{lambda_i(a - c_i)} on 8 intervals of a =
// |x| (index from the exponent and top mantissa bit of a + 1), lambda_i a
// degree-DEG polynomial added into the exp's reduced argument, and the last
// product carried as a float pair (th + tl) so only the final add rounds at
// full weight. Fitting ln R to 0.1 u on these intervals needs degree 5-7
// (scripts/erf_error_budget.py prints them). Each coefficient is one lookup
// per vector: `vpermps` (8 entries); the `none` rows skip the lookups (a
// lower bound on any lookup).
// Single thread, 393 216 N(0, 2) floats, best of 200 passes, same process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "gelu_cpu_avx2.cpp"

namespace gelu_avx2 {
struct Tables {
  vf coef[10], centre, scale;
};

template <int DEG, bool LOOKUP>
__attribute__((always_inline)) inline vf erf_table(vf x, const Tables& T) {
  const auto look = [](vf tab, __m256i i) { return LOOKUP ? _mm256_permutevar8x32_ps(tab, i) : tab; };
  const vf ax = vabs(x);
  const GeluExpHalfSq e = gelu_exp_neg_half_sq(ax);  // the exp part of gelu_erf_core
  // Interval index: exponent and top mantissa bit of a + 1 (vpermps reads the low 3 bits).
  const __m256i idx = _mm256_srli_epi32(_mm256_castps_si256(vadd(ax, vset(1.0f))), 22);
  const vf t = vsub(ax, look(T.centre, idx));
  vf p = look(T.coef[DEG], idx);
  for (int d = DEG - 1; d >= 0; --d) p = vfma(p, t, look(T.coef[d], idx));
  const vf em1 = gelu_expm1_red(vadd(e.r_hi, vadd(e.r_lo, p)));  // (needs one degree more for |r| <= 0.5)
  // y = -a*C*(1 + em1)*2^k as th + tl: only th + (th*em1 + tl) rounds at full weight.
  const vf nax = vnegabs(x);
  const vf c = look(T.scale, idx);
  const vf th = vmul(nax, c);
  const vf tl = vfms(nax, c, th);
  const vf g = vldexp_j(vadd(th, vfma(th, em1, tl)), e.j);
  vf y = vsel_sign(x, g, vadd(x, g));
  const vm wide = vnonneg_gt(ax, GELU_ERF_FAST_X);
  if (vany(wide)) y = vsel(wide, gelu_erf_wide<false>(x, ax), y);
  return y;
}
}  // namespace gelu_avx2

using namespace gelu_avx2;

template <class F>
static double ns_per_elem(F kernel, const std::vector<float>& x, std::vector<float>& y, int passes) {
  double best = 1e30;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i + 16 <= x.size(); i += 16) {
      const vf u = _mm256_loadu_ps(&x[i]), v = _mm256_loadu_ps(&x[i + 8]);
      _mm256_storeu_ps(&y[i], kernel(u));
      _mm256_storeu_ps(&y[i + 8], kernel(v));
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / x.size() * 1e9;
}

int main() {
  std::vector<float> x(393216), y(x.size());
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& v : x) v = normal(gen);
  Tables T;
  for (int i = 0; i < 10; ++i) T.coef[i] = _mm256_setr_ps(1e-3f * i, 2e-3f, 3e-3f, 1e-3f, 2e-3f, 1e-4f, 1e-3f, 1e-3f);
  T.centre = _mm256_setr_ps(0.25f, 0.75f, 1.5f, 2.5f, 4.0f, 6.0f, 9.0f, 13.0f);
  T.scale = _mm256_set1_ps(0.3f);

  const double fast = ns_per_elem([](vf v) { return gelu_erf_v<false>(v); }, x, y, 200);
  const double precise = ns_per_elem([](vf v) { return gelu_erf_v<true>(v); }, x, y, 50);
  std::printf("%-28s %6.3f ns/elem  1.00x\n", "default (fast) erf", fast);
  std::printf("%-28s %6.3f ns/elem  %.2fx\n", "precise erf (double)", precise, precise / fast);
#define ROW(DEG, LOOKUP)                                                                          \
  {                                                                                               \
    const double t = ns_per_elem([&](vf v) { return erf_table<DEG, LOOKUP>(v, T); }, x, y, 200); \
    std::printf("table, degree %d, %-11s %6.3f ns/elem  %.2fx\n", DEG, LOOKUP ? "vpermps" : "none", t, t / fast); \
  }
  ROW(7, true) ROW(8, true) ROW(9, true) ROW(7, false) ROW(8, false) ROW(9, false)
  return y[5] == 12345.0f;  // keep the results live
}
