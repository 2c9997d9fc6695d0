// The CUDA kernels' host emulation (gelu_cuda_emu.cpp) against the accuracy
// contract (gelu_cuda_bound.h: a long double reference of each element's
// float input), with the hardware approximations at either end of their
// documented error; built under ASan/UBSan by tests/test_cuda_emulation.py.
// Every buffer is allocated at its exact size (an offset shifts the data, not
// the end), so a kernel touching one element past x, b or y is an ASan error.
//   gelu_cuda_emu_check           the CI sweep (prints one line per group)
//   gelu_cuda_emu_check huge      n > 2^31 fp16, guard pages after x, b, y
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "gelu_contract.h"
#include "gelu_cuda_bound.h"
#include "gelu_cuda_emu.h"

namespace {
int g_failures = 0;
const char* const kForms[] = {"erf", "tanh", "sigmoid"};
const char* const kDtypes[] = {"f32", "f16", "bf16"};
size_t esize(int dt) { return dt == GELU_DTYPE_F32 ? 4 : 2; }
int vec(int dt) { return static_cast<int>(16 / esize(dt)); }

// Inputs: every class of value (random bit patterns: NaN, inf, subnormals,
// huge) mixed with the range where GELU bends.
std::vector<char> make_values(int dt, size_t n, std::mt19937& rng) {
  std::vector<char> v(n * esize(dt));
  std::uniform_real_distribution<float> mid(-16.f, 16.f);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = rng();
    if (rng() % 2) {
      const float f = mid(rng);
      memcpy(&bits, &f, 4);
      if (dt != GELU_DTYPE_F32) bits >>= 16;  // bf16 truncation; an f16 pattern is random anyway
    }
    memcpy(&v[i * esize(dt)], &bits, esize(dt));
  }
  return v;
}

// An element's float value.
float value(int dt, const char* p) {
  uint32_t u = 0;
  memcpy(&u, p, esize(dt));
  if (dt == GELU_DTYPE_F32) {
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  return dt == GELU_DTYPE_F16 ? gelu_bound::f16_value(static_cast<uint16_t>(u)) : gelu_bound::bf16_value(static_cast<uint16_t>(u));
}

// y[i] within the contract for x[i] (+ b[i % bl], added in float as the kernel does).
bool within(int form, int dt, const char* x, const char* b, int64_t bl, const char* y, int64_t i, float alpha) {
  const size_t es = esize(dt);
  float v = value(dt, x + i * es);
  if (b) v += value(dt, b + (i % bl) * es);
  uint32_t yb = 0;
  memcpy(&yb, y + i * es, es);
  return gelu_bound::bound_ratio(form, dt, v, yb, alpha) <= 1.0;
}

// One launch: x, b, y at element offsets ox, ob, oy from 16-byte aligned
// allocations of exactly the size used.
void check(int form, int dt, int64_t n, int64_t bl, int ox, int ob, int oy, std::mt19937& rng) {
  const size_t es = esize(dt);
  const std::vector<char> xv = make_values(dt, static_cast<size_t>(n), rng);
  const std::vector<char> bv = make_values(dt, static_cast<size_t>(bl > 0 ? bl : 0), rng);
  // Exact sizes: malloc'd blocks end where the data ends (ASan red zone next).
  char* xb = static_cast<char*>(malloc((n + ox) * es + 1));
  char* bb = bl > 0 ? static_cast<char*>(malloc((bl + ob) * es + 1)) : nullptr;
  char* yb = static_cast<char*>(malloc((n + oy) * es + 1));
  // malloc is 16-byte aligned: the offset alone sets the alignment.
  char* x = xb + ox * es;
  char* b = bb ? bb + ob * es : nullptr;
  char* y = yb + oy * es;
  if (n > 0) memcpy(x, xv.data(), xv.size());
  if (b) memcpy(b, bv.data(), bv.size());
  // A canary no element may keep: NaN (for inputs whose result is NaN, a
  // second canary below).
  const float alpha = GELU_ONNX_QUICK_GELU_ALPHA;
  const auto f = static_cast<gelu_form_t>(form);
  const auto d = static_cast<gelu_dtype_t>(dt);
  int64_t first = -1;
  gelu_status_t rg = GELU_OK;
  for (const int canary : {0x7f, 0x00}) {
    memset(y, canary, n * es);
    const gelu_status_t r = gelu_cuda_launch(f, d, x, b, bl, y, n, alpha, nullptr);
    if (r != GELU_OK) rg = r;
    for (int64_t i = 0; i < n && first < 0; ++i)
      if (!within(form, dt, x, b, bl, y, i, alpha)) first = i;
  }
  if (rg != GELU_OK || first >= 0) {
    if (first >= 0 && g_failures < 20) {
      uint32_t xi = 0, bi = 0, yi = 0;
      memcpy(&xi, x + first * es, es), memcpy(&yi, y + first * es, es);
      if (b) memcpy(&bi, b + (first % bl) * es, es);
      fprintf(stderr, "  element %lld: x=%#x b=%#x emu=%#x\n", (long long)first, xi, bi, yi);
    }
    if (++g_failures <= 20)
      fprintf(stderr, "OUT OF BOUND %s %s n=%lld bias_len=%lld offsets x=%d b=%d y=%d: status %d, first element %lld\n",
              kForms[form], kDtypes[dt], (long long)n, (long long)bl, ox, ob, oy, rg, (long long)first);
  }
  free(xb);
  free(bb);
  free(yb);
}

// One sweep: the threads in `order`, the approximations at `end` (-1, +1).
void sweep(int order, int end) {
  gelu_cuda_emu_order(order, 12345u + order);
  gelu_cuda_emu_approx_end(end);
  std::mt19937 rng(7 + order);
  const int64_t tile = 256 * 2;  // threads * packs per thread (gelu_cuda_body.h)
  for (int form = 0; form < 3; ++form) {
    for (int dt = 0; dt < 3; ++dt) {
      long cases = 0;
      const int V = vec(dt);
      // Tails, n = 0, and sizes around one and several full tiles.
      std::vector<int64_t> sizes = {0, 1, 2, 3, V - 1, V, V + 1, 2 * V + 3, 100, 1000, 4099};
      for (int64_t t : {tile * V, 3 * tile * V})
        for (int64_t d : {-V - 1, -1, 0, 1, V, V + 3}) sizes.push_back(t + d);
      for (int bias = 0; bias < 2; ++bias) {
        for (int64_t n : sizes) {
          // A bias row the vector kernel can take where n allows it.
          const int64_t bl = bias ? (n % V == 0 && n > 0 ? V : 1) : 0;
          for (int ox = 0; ox <= V; ++ox) check(form, dt, n, bl, ox, 0, 0, rng), ++cases;
          for (int oy = 1; oy <= V; ++oy) check(form, dt, n, bl, 0, 0, oy, rng), ++cases;
          if (bias)
            for (int ob = 1; ob <= V; ++ob) check(form, dt, n, bl, 0, ob, 0, rng), ++cases;
        }
        // Large launches (hundreds of blocks).
        const int64_t big = 4100 * tile * V / 16 + V;
        check(form, dt, big, bias ? V : 0, 0, 0, 0, rng), check(form, dt, big - V + 1, bias ? 1 : 0, 1, 0, 0, rng);
        cases += 2;
        // Several trips per block: the grid capped at a few blocks (the launch
        // then keeps each block's bias offsets the same on every trip, or
        // gives each block one trip), and grids the launch never picks (any
        // grid must still be right). x aligned: the vector kernel where the
        // bias row allows it; x one element off: the one-element kernel.
        const std::vector<int64_t> rows = bias ? std::vector<int64_t>{1, V, 3 * V, 5 * V, 7 * V, 3 * V + 1, 1000}
                                               : std::vector<int64_t>{11 * tile * V + 3};
        for (int64_t cap : {1, 3, 5}) {
          for (int64_t blocks : {int64_t(0), cap + 1}) {
            gelu_cuda_emu_grid(cap, blocks);
            for (int64_t r : rows) {
              const int64_t n = bias ? r * ((11 * tile * V) / r + 1) : r, bl = bias ? r : 0;
              check(form, dt, n, bl, 0, 0, 0, rng), check(form, dt, n, bl, 1, 0, 0, rng);
              cases += 2;
            }
          }
        }
        gelu_cuda_emu_grid(0, 0);
        if (bias) {
          // Every bias length 1..1000 (the vector kernel when V divides it).
          for (int64_t bl = 1; bl <= 1000; ++bl) check(form, dt, bl * (1 + (bl * 7) % 5), bl, 0, 0, 0, rng), ++cases;
          // Bias rows over several full tiles (a thread's packs cross bias rows).
          for (int64_t bl : {int64_t(8 * V), int64_t(768), int64_t(3072), int64_t(tile * V + V)})
            check(form, dt, bl * ((3 * tile * V) / bl + 2), bl, 0, 0, 0, rng), ++cases;
        }
      }
      printf("order %d end %+d %s %s: %ld launches, %d mismatches so far\n", order, end, kForms[form], kDtypes[dt], cases, g_failures);
      fflush(stdout);
    }
  }
}

// n > 2^31 fp16 with each array ending at a PROT_NONE page: the vector
// kernel with a bias (x, y, b 16-byte aligned), then the one-element kernel
// (x, y one element off). Every element checked against the contract.
char* guarded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t body = (bytes + page - 1) / page * page;
  char* m = static_cast<char*>(mmap(nullptr, body + page, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (m == MAP_FAILED || mprotect(m + body, page, PROT_NONE) != 0) return nullptr;
  return m + body - bytes;  // the data ends at the guard page
}

int huge() {
  // n > 2^31, a multiple of the bias length (else the launch refuses the
  // bias) and of 8 (2 * n % 16 == 0: the vector kernel covers it all)
  const int64_t bl = 1000, n = ((int64_t(1) << 31) / bl + 12) * bl;
  char* x = guarded(n * 2);
  char* b = guarded(bl * 2);
  char* y = guarded(n * 2);
  if (!x || !b || !y) {
    fprintf(stderr, "cannot map 2 x %lld bytes\n", (long long)(n * 2));
    return 3;
  }
  std::mt19937 rng(99);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = static_cast<uint16_t>(rng());
    memcpy(x + 2 * i, &h, 2);
  }
  for (int64_t i = 0; i < bl; ++i) {
    const uint16_t h = static_cast<uint16_t>(rng());
    memcpy(b + 2 * i, &h, 2);
  }
  gelu_cuda_emu_order(GELU_EMU_FORWARD, 0);
  int64_t bad = 0;
  for (int view = 0; view < 2; ++view) {
    const int64_t off = view, m = n - off, vbl = view ? 0 : bl;
    char* xv = x + off * 2;
    char* yv = y + off * 2;
    const char* bv = view ? nullptr : b;
    memset(yv, 0x7f, m * 2);
    const gelu_status_t st = gelu_cuda_launch(GELU_FORM_ERF, GELU_DTYPE_F16, xv, bv, vbl, yv, m, 0.f, nullptr);
    if (st != GELU_OK) {
      fprintf(stderr, "gelu_cuda_launch refused n=%lld: status %d\n", (long long)m, (int)st);
      return 4;
    }
    int64_t differing = 0;
    for (int64_t i = 0; i < m; ++i) differing += !within(GELU_FORM_ERF, GELU_DTYPE_F16, xv, bv, vbl, yv, i, 0.f);
    printf("huge (%s kernel): n=%lld, %lld elements out of bound\n", view ? "one-element" : "16-byte, bias",
           (long long)m, (long long)differing);
    bad += differing;
  }
  return bad ? 1 : 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "huge") return huge();
  // Each order once, the approximations low, high, low.
  for (int order = GELU_EMU_FORWARD; order <= GELU_EMU_SHUFFLED; ++order) sweep(order, order == GELU_EMU_REVERSE ? 1 : -1);
  printf("%s: %d mismatches\n", g_failures ? "FAIL" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
