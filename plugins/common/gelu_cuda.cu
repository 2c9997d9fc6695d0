// CUDA GELU kernels: gelu_cuda_body.h on the device. The math is
// gelu_cuda_math.h (hardware ex2/rcp approximations where the accuracy bound
// holds, branch-free; explicit FMAs and round-to-nearest intrinsics, so no
// flag fuses or reorders them), fp16/bf16 computed in fp32 and rounded once;
// 128-bit streaming loads/stores when the pointers and the bias row allow it,
// element-wise otherwise; 64-bit indexing; a grid of one wave of resident
// blocks (SMs x occupancy, grid-stride); the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

#include "gelu_cuda_args.h"

namespace gelu_cuda_io {
template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Bit-exact moves between a pack and the machine word of its size.
template <int N> struct Word;
template <> struct Word<2> { typedef unsigned short type; };
template <> struct Word<4> { typedef unsigned int type; };
template <> struct Word<16> { typedef uint4 type; };
template <typename P> __device__ __forceinline__ P from_word(typename Word<sizeof(P)>::type w) {
  P p;
  memcpy(&p, &w, sizeof p);
  return p;
}
// x and y are touched once: evict-first (ld.cs / st.cs); the bias row is reused.
template <typename P> __device__ __forceinline__ P ld_stream(const P* p) {
  return from_word<P>(__ldcs(reinterpret_cast<const typename Word<sizeof(P)>::type*>(p)));
}
template <typename P> __device__ __forceinline__ P ld_keep(const P* p) {
  return from_word<P>(__ldg(reinterpret_cast<const typename Word<sizeof(P)>::type*>(p)));
}
template <typename P> __device__ __forceinline__ void st_stream(P* p, const P& v) {
  typename Word<sizeof(P)>::type w;
  memcpy(&w, &v, sizeof w);
  __stcs(reinterpret_cast<typename Word<sizeof(P)>::type*>(p), w);
}
// Pack <-> float[VEC]; two elements per conversion instruction (F2FP PACK_AB)
// for the 16-bit types.
template <typename P> using Elem = std::remove_cv_t<std::remove_reference_t<decltype(P::v[0])>>;
template <typename P> __device__ __forceinline__ void to_f32v(const P& p, float* f) {
  using T = Elem<P>;
  constexpr int V = sizeof(P) / sizeof(T);
  if constexpr (std::is_same_v<T, __half> && V % 2 == 0) {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const float2 g = __half22float2(__halves2half2(p.v[e], p.v[e + 1]));
      f[e] = g.x, f[e + 1] = g.y;
    }
  } else if constexpr (std::is_same_v<T, __nv_bfloat16> && V % 2 == 0) {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const float2 g = __bfloat1622float2(__halves2bfloat162(p.v[e], p.v[e + 1]));
      f[e] = g.x, f[e + 1] = g.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) f[e] = to_f32(p.v[e]);
  }
}
template <typename P> __device__ __forceinline__ void from_f32v(const float* f, P& p) {
  using T = Elem<P>;
  constexpr int V = sizeof(P) / sizeof(T);
  if constexpr (std::is_same_v<T, __half> && V % 2 == 0) {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const __half2 h = __floats2half2_rn(f[e], f[e + 1]);
      p.v[e] = __low2half(h), p.v[e + 1] = __high2half(h);
    }
  } else if constexpr (std::is_same_v<T, __nv_bfloat16> && V % 2 == 0) {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[e], f[e + 1]);
      p.v[e] = __low2bfloat16(h), p.v[e + 1] = __high2bfloat16(h);
    }
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) p.v[e] = from_f32<T>(f[e]);
  }
}
// A warp-uniform decision: every lane of the warp gets the OR of all lanes.
// (__host__ too: gelu_body is __host__ __device__; the host pass never runs it.)
__host__ __device__ __forceinline__ bool warp_any(bool p) {
#if defined(__CUDA_ARCH__)
  return __any_sync(0xffffffffu, p);
#else
  return p;
#endif
}
}  // namespace gelu_cuda_io

#include "gelu_cuda_body.h"

namespace {

// Accuracy is the contract (gelu_cuda_math.h: the bounds of docs/kernels.md):
// no contraction and no flush of subnormals outside the explicit .ftz
// approximations; -ftz=true (-use_fast_math) is undone by the build's
// -ftz=false (plugins/CMakeLists.txt). At most 40 registers: 6 blocks
// (1536 threads) per SM; 48 and 5 for fp16/bf16 with a bias
// (gelu_cuda::min_blocks_per_sm).
template <int FORM, typename T, int VEC, bool BIAS>
__global__ void __launch_bounds__(gelu_cuda::kThreads, (gelu_cuda::min_blocks_per_sm<T, BIAS>()))
    gelu_kernel(const T* __restrict__ x, const T* __restrict__ b, int64_t bias_len,
                T* __restrict__ y, int64_t n, float alpha) {
  gelu_cuda::gelu_body<FORM, T, VEC, BIAS>(blockIdx.x, gridDim.x, threadIdx.x, x, b, bias_len, y, n, alpha, false);
}
// The sigmoid form with 0 < |alpha| < 2^-50 (gelu_cuda_math::sigmoid_alpha_fast):
// the CPU formulas for every element. A kernel of its own, so the usual
// kernels carry no branch for it. No blocks-per-SM bound: held to the fast
// kernels' register budget its fp16/bf16 bias variants spilled (8-24 bytes
// of stack on sm_90); this rare path trades occupancy for none.
template <int FORM, typename T, int VEC, bool BIAS>
__global__ void __launch_bounds__(gelu_cuda::kThreads)
    gelu_exact_kernel(const T* __restrict__ x, const T* __restrict__ b, int64_t bias_len,
                      T* __restrict__ y, int64_t n, float alpha) {
  gelu_cuda::gelu_body<FORM, T, VEC, BIAS>(blockIdx.x, gridDim.x, threadIdx.x, x, b, bias_len, y, n, alpha, true);
}

// One wave of resident blocks of this kernel on the current device (SMs x
// blocks per SM), asked once per device and kernel.
template <int FORM, typename T, int VEC, bool BIAS>
int64_t resident_blocks() {
  constexpr int kDevices = 64;
  static int cache[kDevices];  // 0: not asked yet (a race only asks twice)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices) return gelu_cuda::kMaxBlocks;
  if (cache[dev] > 0) return cache[dev];
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gelu_kernel<FORM, T, VEC, BIAS>,
                                                    gelu_cuda::kThreads, 0) != cudaSuccess ||
      sms <= 0 || per_sm <= 0) {
    cudaGetLastError();  // clear it: the launch below reports its own
    return gelu_cuda::kMaxBlocks;
  }
  cache[dev] = sms * per_sm;
  return cache[dev];
}

template <int FORM, typename T, int VEC, bool BIAS>
cudaError_t launch(const void* x, const void* b, int64_t bl, void* y, int64_t n, float a,
                   cudaStream_t s) {
  const int64_t wave = resident_blocks<FORM, T, VEC, BIAS>();
  const unsigned blocks = static_cast<unsigned>(gelu_cuda::grid_blocks(n, VEC, BIAS ? bl : 0, wave));
  if constexpr (FORM == GELU_FORM_SIGMOID) {
    if (!gelu_cuda_math::sigmoid_alpha_fast(a)) {
      gelu_exact_kernel<FORM, T, VEC, BIAS><<<blocks, gelu_cuda::kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<const T*>(b), bl, static_cast<T*>(y), n, a);
      return cudaGetLastError();
    }
  }
  gelu_kernel<FORM, T, VEC, BIAS><<<blocks, gelu_cuda::kThreads, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(b), bl, static_cast<T*>(y), n, a);
  return cudaGetLastError();
}

template <int FORM, typename T>
cudaError_t dispatch(const void* x, const void* b, int64_t bl, void* y, int64_t n, float a,
                     cudaStream_t s) {
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = gelu_cuda::vec_ok(x, b, bl, y, VEC);
  if (b) {
    return vec ? launch<FORM, T, VEC, true>(x, b, bl, y, n, a, s)
               : launch<FORM, T, 1, true>(x, b, bl, y, n, a, s);
  }
  return vec ? launch<FORM, T, VEC, false>(x, b, bl, y, n, a, s)
             : launch<FORM, T, 1, false>(x, b, bl, y, n, a, s);
}

template <int FORM>
cudaError_t dispatch_dtype(gelu_dtype_t dt, const void* x, const void* b, int64_t bl, void* y,
                           int64_t n, float a, cudaStream_t s) {
  if (dt == GELU_DTYPE_F32) return dispatch<FORM, float>(x, b, bl, y, n, a, s);
  if (dt == GELU_DTYPE_F16) return dispatch<FORM, __half>(x, b, bl, y, n, a, s);
  return dispatch<FORM, __nv_bfloat16>(x, b, bl, y, n, a, s);
}

// The last failed launch of this thread, for gelu_cuda_last_error().
thread_local char g_last_error[256] = "";

}  // namespace

extern "C" gelu_status_t gelu_cuda_launch(gelu_form_t form, gelu_dtype_t dtype, const void* x,
                                          const void* bias, int64_t bias_len, void* y, int64_t n,
                                          float alpha, void* stream) {
  bool empty;
  const gelu_status_t st = gelu_cuda_check_args(form, dtype, x, bias, bias_len, y, n, &empty);
  if (st != GELU_OK || empty) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err;
  if (form == GELU_FORM_ERF) err = dispatch_dtype<GELU_FORM_ERF>(dtype, x, bias, bias_len, y, n, alpha, s);
  else if (form == GELU_FORM_TANH) err = dispatch_dtype<GELU_FORM_TANH>(dtype, x, bias, bias_len, y, n, alpha, s);
  else err = dispatch_dtype<GELU_FORM_SIGMOID>(dtype, x, bias, bias_len, y, n, alpha, s);
  if (err == cudaSuccess) return GELU_OK;
  snprintf(g_last_error, sizeof g_last_error, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
  return GELU_ERR_CUDA;
}

extern "C" const char* gelu_cuda_last_error(void) { return g_last_error; }
