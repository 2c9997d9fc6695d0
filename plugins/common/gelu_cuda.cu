// CUDA GELU kernels: the same math as the CPU paths (gelu_math.inc through
// the scalar primitives, compiled with --fmad=false so the only FMAs are the
// explicit ones), fp16/bf16 computed in fp32 and rounded once.
// 128-bit vector loads/stores when the pointers and the bias row allow it,
// a scalar tail, 64-bit indexing, grid-stride loops, the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gelu_cuda_args.h"
#include "gelu_kernels.h"
#include "gelu_simd_scalar.h"

namespace {

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

template <int FORM>
__device__ __forceinline__ float apply(float v, float alpha) {
  if (FORM == GELU_FORM_ERF) return gelu_scalar::gelu_erf_v<true>(v);  // precise: memory-bound anyway
  if (FORM == GELU_FORM_TANH) return gelu_scalar::gelu_tanh_v(v);
  return gelu_scalar::gelu_sigmoid_v(v, alpha);
}

// VEC elements per 16-byte access; VEC == 1 is the plain element-wise kernel.
template <int FORM, typename T, int VEC, bool BIAS>
__global__ void gelu_kernel(const T* __restrict__ x, const T* __restrict__ b, int64_t bias_len,
                            T* __restrict__ y, int64_t n, float alpha) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  struct alignas(16) Pack { T v[VEC]; };
  for (int64_t i = tid; i < nvec; i += stride) {
    Pack px = reinterpret_cast<const Pack*>(x)[i], pb, py;
    if (BIAS) pb = *reinterpret_cast<const Pack*>(b + (i * VEC) % bias_len);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float v = to_f32(px.v[k]);
      if (BIAS) v += to_f32(pb.v[k]);
      py.v[k] = from_f32<T>(apply<FORM>(v, alpha));
    }
    reinterpret_cast<Pack*>(y)[i] = py;
  }
  for (int64_t i = nvec * VEC + tid; i < n; i += stride) {  // tail (< VEC elements)
    float v = to_f32(x[i]);
    if (BIAS) v += to_f32(b[i % bias_len]);
    y[i] = from_f32<T>(apply<FORM>(v, alpha));
  }
}

template <int FORM, typename T, int VEC, bool BIAS>
cudaError_t launch(const void* x, const void* b, int64_t bl, void* y, int64_t n, float a,
                   cudaStream_t s) {
  const int threads = 256;
  const int64_t work = (n + VEC - 1) / VEC;
  const int64_t want = (work + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 8192 ? want : 8192);
  gelu_kernel<FORM, T, VEC, BIAS><<<blocks, threads, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(b), bl, static_cast<T*>(y), n, a);
  return cudaGetLastError();
}

template <int FORM, typename T>
cudaError_t dispatch(const void* x, const void* b, int64_t bl, void* y, int64_t n, float a,
                     cudaStream_t s) {
  constexpr int VEC = 16 / sizeof(T);
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const bool vec_ok = aligned(x) && aligned(y) && (!b || (aligned(b) && bl % VEC == 0));
  if (b) {
    return vec_ok ? launch<FORM, T, VEC, true>(x, b, bl, y, n, a, s)
                  : launch<FORM, T, 1, true>(x, b, bl, y, n, a, s);
  }
  return vec_ok ? launch<FORM, T, VEC, false>(x, b, bl, y, n, a, s)
                : launch<FORM, T, 1, false>(x, b, bl, y, n, a, s);
}

template <int FORM>
cudaError_t dispatch_dtype(gelu_dtype_t dt, const void* x, const void* b, int64_t bl, void* y,
                           int64_t n, float a, cudaStream_t s) {
  if (dt == GELU_DTYPE_F32) return dispatch<FORM, float>(x, b, bl, y, n, a, s);
  if (dt == GELU_DTYPE_F16) return dispatch<FORM, __half>(x, b, bl, y, n, a, s);
  return dispatch<FORM, __nv_bfloat16>(x, b, bl, y, n, a, s);
}

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
  return err == cudaSuccess ? GELU_OK : GELU_ERR_CUDA;
}
