// AVX-512 path: 16 floats per vector, masks for selects. Built with
// -mavx512f -mavx512bw -mavx512dq -mavx512vl (this file only); called only
// when the CPU and OS report those features.
#include <immintrin.h>
#include <string.h>

#include "gelu_cpu_paths.h"
#include "gelu_erf_coeffs.h"

#define GELU_HD
namespace gelu_avx512 {
typedef __m512 vf;
typedef __mmask16 vm;
constexpr int kWidth = 16;

inline vf vset(float a) { return _mm512_set1_ps(a); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vscale_m4(vf t, vf j) {
  const __m512i e = _mm512_slli_epi32(_mm512_srli_epi32(_mm512_castps_si512(j), 2), 23);
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(t), e));
}
inline vf vlut4(vf j, float t0, float t1, float t2, float t3) {
  return _mm512_permutevar_ps(_mm512_setr_ps(t0, t1, t2, t3, t0, t1, t2, t3, t0, t1, t2, t3, t0, t1, t2, t3),
                              _mm512_castps_si512(j));
}
inline vf vsel_sign(vf x, vf a, vf b) { return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(x)), b, a); }
inline vf vldexp_j(vf f, vf j) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(f), _mm512_slli_epi32(_mm512_castps_si512(j), 23)));
}
inline vf vabs(vf a) { return _mm512_abs_ps(a); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vm vlt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline vf vsel(vm m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
inline vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
inline vf vfms(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
inline vf vnegabs(vf a) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
}
inline vf vexp_bits(vf j, int c) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_castps_si512(j), _mm512_set1_epi32(c)), 23));
}
// |a| > lim or NaN, compared as integers.
inline vm vabs_gt(vf a, float lim) {
  const __m512i ab = _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff));
  return _mm512_cmpgt_epi32_mask(ab, _mm512_castps_si512(_mm512_set1_ps(lim)));
}
// a > lim or NaN, for a with a clear sign bit (lim >= 0).
inline vm vnonneg_gt(vf a, float lim) {
  return _mm512_cmpgt_epi32_mask(_mm512_castps_si512(a), _mm512_castps_si512(_mm512_set1_ps(lim)));
}
inline bool vany(vm m) { return m != 0; }
// f * P(a) / Q(a) in double, 8 lanes at a time.
inline __m256 frac_pd(__m256 f, __m256 a, __m256 e) {
  const __m512d fd = _mm512_cvtps_pd(f), ad = _mm512_cvtps_pd(a);
  __m512d p, q;
  GELU_R_EVAL(__m512d, _mm512_fmadd_pd, _mm512_set1_pd, ad, p, q);
  const __m512d fe = _mm512_fmadd_pd(fd, _mm512_cvtps_pd(e), fd);
  return _mm512_cvtpd_ps(_mm512_div_pd(_mm512_mul_pd(fe, p), q));
}
inline __m256 half_hi(vf v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
inline vf vfrac_d(vf f, vf a, vf e) {
  const __m256 lo = frac_pd(_mm512_castps512_ps256(f), _mm512_castps512_ps256(a), _mm512_castps512_ps256(e));
  const __m256 hi = frac_pd(half_hi(f), half_hi(a), half_hi(e));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// The rare wide-range formulas out of line: the hot loop keeps its constants in registers.
#define GELU_COLD __attribute__((noinline, cold))
#define GELU_HOT __attribute__((always_inline))
#include "gelu_math.inc"

inline vf vload_f32(const void* p) { return _mm512_loadu_ps(p); }
inline vf vload_f16(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
inline vf vload_bf16(const void* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline void vstore_f32(void* p, vf v) { _mm512_storeu_ps(p, v); }
inline void vstore_f16(void* p, vf v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline __m256i pack_bf16(vf v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, qnan);
  return _mm512_cvtepi32_epi16(r);
}
inline void vstore_bf16(void* p, vf v) { _mm256_storeu_si256(static_cast<__m256i*>(p), pack_bf16(v)); }

constexpr bool kHasStream = true;
inline void vstream_f32(void* p, vf v) { _mm512_stream_ps(static_cast<float*>(p), v); }
inline void vstream_f16(void* p, vf v) {
  _mm256_stream_si256(static_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void vstream_bf16(void* p, vf v) { _mm256_stream_si256(static_cast<__m256i*>(p), pack_bf16(v)); }
inline void vstream_fence() { _mm_sfence(); }

#include "gelu_cpu_loop.inc"
}  // namespace gelu_avx512

void gelu_range_avx512(GELU_RANGE_ARGS) {
  gelu_avx512::gelu_range_impl(form, dtype, x, bias, bias_len, y, begin, end, alpha, stream);
}
