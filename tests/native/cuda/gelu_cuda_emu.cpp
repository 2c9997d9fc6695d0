// Host emulation of the CUDA kernels: gelu_cuda_body.h compiled for the CPU
// and run for every (block, thread) of the grid the device launch would use,
// behind the same C ABI as gelu_cuda.cu (gelu_cuda_launch,
// gelu_cuda_last_error). Threads run one after another in the order set by
// gelu_cuda_emu_order (forward, reverse or shuffled): the kernel has no
// shared memory or synchronisation, so any order must give the same bits.
// fp16/bf16 convert with the CPU kernels' scalar IEEE round-to-nearest-even
// (the device uses the hardware conversions: the same results, up to NaN payloads).
// The hardware approximations (ex2.approx, rcp.approx) are the exact function
// moved to one end of their documented error (gelu_cuda_emu_approx_end), so
// the results are checked against the accuracy bound, not bit for bit.
#include <stdio.h>

#include <algorithm>
#include <type_traits>
#include <atomic>
#include <random>
#include <vector>

#include "gelu_cuda_args.h"
#include "gelu_cuda_emu.h"
#include "gelu_simd_scalar.h"

namespace gelu_cuda_io {
struct h16 { uint16_t u; };  // IEEE half, bits only
struct b16 { uint16_t u; };  // bfloat16, bits only
inline float to_f32(float v) { return v; }
inline float to_f32(h16 v) { return gelu_scalar::f16_to_f32(v.u); }
inline float to_f32(b16 v) { return gelu_scalar::bf16_to_f32(v.u); }
template <typename T> T from_f32(float v);
template <> inline float from_f32<float>(float v) { return v; }
template <> inline h16 from_f32<h16>(float v) { return {gelu_scalar::f32_to_f16(v)}; }
template <> inline b16 from_f32<b16>(float v) { return {gelu_scalar::f32_to_bf16(v)}; }
template <typename P> inline P ld_stream(const P* p) { return *p; }
template <typename P> inline P ld_keep(const P* p) { return *p; }
template <typename P> inline void st_stream(P* p, const P& v) { *p = v; }
template <typename P> inline void to_f32v(const P& p, float* f) {
  for (size_t e = 0; e < sizeof(p.v) / sizeof(p.v[0]); ++e) f[e] = to_f32(p.v[e]);
}
template <typename P> inline void from_f32v(const float* f, P& p) {
  for (size_t e = 0; e < sizeof(p.v) / sizeof(p.v[0]); ++e)
    p.v[e] = from_f32<typename std::remove_reference<decltype(p.v[0])>::type>(f[e]);
}
// Threads run one at a time: a lane's vote is its own. The device's warp-wide
// vote takes the same (exact) path for more elements: any subset is right.
inline bool warp_any(bool p) { return p; }
}  // namespace gelu_cuda_io

#include "gelu_cuda_body.h"

namespace {
std::atomic<int> g_order{GELU_EMU_FORWARD};
std::atomic<unsigned> g_seed{1};
thread_local char g_last_error[96] = "";
std::atomic<bool> g_fail_next{false};
std::atomic<int64_t> g_max_blocks{gelu_cuda::kMaxBlocks}, g_blocks{0};

template <int FORM, typename T, int VEC, bool BIAS>
void run_grid(const void* x, const void* b, int64_t bl, void* y, int64_t n, float a) {
  const int64_t forced = g_blocks.load(), threads = gelu_cuda::kThreads;
  const int64_t blocks = forced > 0 ? forced : gelu_cuda::grid_blocks(n, VEC, BIAS ? bl : 0, g_max_blocks.load());
  const bool exact = FORM == GELU_FORM_SIGMOID && !gelu_cuda_math::sigmoid_alpha_fast(a);
  const auto body = [&](int64_t g) {
    gelu_cuda::gelu_body<FORM, T, VEC, BIAS>(g / threads, blocks, static_cast<int>(g % threads),
                                             static_cast<const T*>(x), static_cast<const T*>(b), bl,
                                             static_cast<T*>(y), n, a, exact);
  };
  const int order = g_order.load();
  if (order == GELU_EMU_SHUFFLED) {
    std::vector<int64_t> ids(static_cast<size_t>(blocks * threads));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(g_seed.load()));
    for (int64_t g : ids) body(g);
  } else if (order == GELU_EMU_REVERSE) {
    for (int64_t g = blocks * threads - 1; g >= 0; --g) body(g);
  } else {
    for (int64_t g = 0; g < blocks * threads; ++g) body(g);
  }
}

template <int FORM, typename T>
void dispatch(const void* x, const void* b, int64_t bl, void* y, int64_t n, float a) {
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = gelu_cuda::vec_ok(x, b, bl, y, VEC);
  if (b) vec ? run_grid<FORM, T, VEC, true>(x, b, bl, y, n, a) : run_grid<FORM, T, 1, true>(x, b, bl, y, n, a);
  else vec ? run_grid<FORM, T, VEC, false>(x, b, bl, y, n, a) : run_grid<FORM, T, 1, false>(x, b, bl, y, n, a);
}

template <int FORM>
void dispatch_dtype(gelu_dtype_t dt, const void* x, const void* b, int64_t bl, void* y, int64_t n, float a) {
  using namespace gelu_cuda_io;
  if (dt == GELU_DTYPE_F32) dispatch<FORM, float>(x, b, bl, y, n, a);
  else if (dt == GELU_DTYPE_F16) dispatch<FORM, h16>(x, b, bl, y, n, a);
  else dispatch<FORM, b16>(x, b, bl, y, n, a);
}
}  // namespace

extern "C" {

gelu_status_t gelu_cuda_launch(gelu_form_t form, gelu_dtype_t dtype, const void* x, const void* bias,
                               int64_t bias_len, void* y, int64_t n, float alpha, void*) {
  bool empty;
  const gelu_status_t st = gelu_cuda_check_args(form, dtype, x, bias, bias_len, y, n, &empty);
  if (st != GELU_OK || empty) return st;
  if (g_fail_next.exchange(false)) {  // a failed launch, as the device build reports one
    snprintf(g_last_error, sizeof(g_last_error), "%s", "too many resources requested for launch (emulated)");
    return GELU_ERR_CUDA;
  }
  if (form == GELU_FORM_ERF) dispatch_dtype<GELU_FORM_ERF>(dtype, x, bias, bias_len, y, n, alpha);
  else if (form == GELU_FORM_TANH) dispatch_dtype<GELU_FORM_TANH>(dtype, x, bias, bias_len, y, n, alpha);
  else dispatch_dtype<GELU_FORM_SIGMOID>(dtype, x, bias, bias_len, y, n, alpha);
  return GELU_OK;
}

const char* gelu_cuda_last_error(void) { return g_last_error; }

void gelu_cuda_emu_fail_next_launch(void) { g_fail_next.store(true); }

void gelu_cuda_emu_grid(int64_t max_blocks, int64_t blocks) {
  g_max_blocks.store(max_blocks > 0 ? max_blocks : gelu_cuda::kMaxBlocks);
  g_blocks.store(blocks);
}

void gelu_cuda_emu_approx_end(int end) { gelu_cuda_math::gelu_cuda_approx_end() = end < 0 ? -1 : end > 0 ? 1 : 0; }

void gelu_cuda_emu_order(int order, unsigned seed) {
  g_order.store(order);
  g_seed.store(seed);
}

}  // extern "C"
