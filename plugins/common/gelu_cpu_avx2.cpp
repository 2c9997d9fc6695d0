// AVX2 + FMA + F16C path: 8 floats per vector. Built with -mavx2 -mfma -mf16c
// (this file only); called only when the CPU reports those features.
#include <immintrin.h>
#include <string.h>

#include "gelu_cpu_paths.h"
#include "gelu_erf_coeffs.h"

#define GELU_HD
namespace gelu_avx2 {
typedef __m256 vf;
typedef __m256 vm;
constexpr int kWidth = 8;

inline vf vset(float a) { return _mm256_set1_ps(a); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vscale_m4(vf t, vf j) {
  const __m256i e = _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(j), 2), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(t), e));
}
inline vf vlut4(vf j, float t0, float t1, float t2, float t3) {
  return _mm256_permutevar_ps(_mm256_setr_ps(t0, t1, t2, t3, t0, t1, t2, t3), _mm256_castps_si256(j));
}
inline vf vsel_sign(vf x, vf a, vf b) { return _mm256_blendv_ps(b, a, x); }
inline vf vldexp_j(vf f, vf j) {
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(f), _mm256_slli_epi32(_mm256_castps_si256(j), 23)));
}
inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vm vlt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline vf vsel(vm m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
inline vf vfnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf vfms(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
inline vf vnegabs(vf a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
inline vf vexp_bits(vf j, int c) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(j), _mm256_set1_epi32(c)), 23));
}
// |a| > lim or NaN, compared as integers (off the FP multiply ports).
inline vm vabs_gt(vf a, float lim) {
  const __m256i ab = _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7fffffff));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(ab, _mm256_castps_si256(_mm256_set1_ps(lim))));
}
// a > lim or NaN, for a with a clear sign bit (lim >= 0).
inline vm vnonneg_gt(vf a, float lim) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(a), _mm256_castps_si256(_mm256_set1_ps(lim))));
}
inline bool vany(vm m) { return _mm256_movemask_ps(m) != 0; }
// f * P(a) / Q(a) in double, 4 lanes at a time.
inline __m128 frac_pd(__m128 f, __m128 a, __m128 e) {
  const __m256d fd = _mm256_cvtps_pd(f), ad = _mm256_cvtps_pd(a);
  __m256d p, q;
  GELU_R_EVAL(__m256d, _mm256_fmadd_pd, _mm256_set1_pd, ad, p, q);
  const __m256d fe = _mm256_fmadd_pd(fd, _mm256_cvtps_pd(e), fd);
  return _mm256_cvtpd_ps(_mm256_div_pd(_mm256_mul_pd(fe, p), q));
}
inline vf vfrac_d(vf f, vf a, vf e) {
  const __m128 lo = frac_pd(_mm256_castps256_ps128(f), _mm256_castps256_ps128(a), _mm256_castps256_ps128(e));
  const __m128 hi = frac_pd(_mm256_extractf128_ps(f, 1), _mm256_extractf128_ps(a, 1), _mm256_extractf128_ps(e, 1));
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

// The rare wide-range formulas out of line: the hot loop keeps its constants in registers.
#define GELU_COLD __attribute__((noinline, cold))
#define GELU_HOT __attribute__((always_inline))
#include "gelu_math.inc"

inline vf vload_f32(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
inline vf vload_f16(const void* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
inline vf vload_bf16(const void* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline void vstore_f32(void* p, vf v) { _mm256_storeu_ps(static_cast<float*>(p), v); }
inline void vstore_f16(void* p, vf v) {
  _mm_storeu_si128(static_cast<__m128i*>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
inline __m128i pack_bf16(vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}
inline void vstore_bf16(void* p, vf v) { _mm_storeu_si128(static_cast<__m128i*>(p), pack_bf16(v)); }

constexpr bool kHasStream = true;
inline void vstream_f32(void* p, vf v) { _mm256_stream_ps(static_cast<float*>(p), v); }
inline void vstream_f16(void* p, vf v) {
  _mm_stream_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void vstream_bf16(void* p, vf v) { _mm_stream_si128(static_cast<__m128i*>(p), pack_bf16(v)); }
inline void vstream_fence() { _mm_sfence(); }

#include "gelu_cpu_loop.inc"
}  // namespace gelu_avx2

void gelu_range_avx2(GELU_RANGE_ARGS) {
  gelu_avx2::gelu_range_impl(form, dtype, x, bias, bias_len, y, begin, end, alpha, stream);
}
