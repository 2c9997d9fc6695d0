// The CUDA kernels' device formulas against the accuracy contract
// (gelu_cuda_bound.h), through the host emulation (gelu_cuda_emu.cpp) with
// the hardware approximations at each end of their documented error: all
// 65536 fp16 / bf16 inputs, 65536 x 8 sums x + b (float values no half type
// holds), and every 257th float32 bit pattern; every form. Prints the worst
// case per (end, form, dtype) as a fraction of the bound (fp32) and the
// count out of bound. Built under ASan/UBSan by tests/test_cuda_emulation.py.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gelu_contract.h"
#include "gelu_cuda_bound.h"
#include "gelu_cuda_emu.h"

int main() {
  const float alpha = GELU_ONNX_QUICK_GELU_ALPHA;
  const char* forms[] = {"erf", "tanh", "sigmoid"};
  long total = 0;
  for (int end = -1; end <= 1; end += 2) {
    gelu_cuda_emu_approx_end(end);
    for (int form = 0; form < 3; ++form) {
      const auto f = static_cast<gelu_form_t>(form);
      for (int dt = 1; dt <= 2; ++dt) {
        std::vector<uint16_t> x(65536), y(65536);
        for (int i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
        long bad = 0;
        const auto value = [dt](uint16_t h) { return dt == 1 ? gelu_bound::f16_value(h) : gelu_bound::bf16_value(h); };
        gelu_cuda_launch(f, static_cast<gelu_dtype_t>(dt), x.data(), nullptr, 0, y.data(), 65536, alpha, nullptr);
        for (int i = 0; i < 65536; ++i) bad += gelu_bound::bound_ratio(form, dt, value(x[i]), y[i], alpha) > 1.0;
        // Sums: a bias row of 8 values that are not multiples of the input's step.
        const uint16_t brow16[8] = {0x3555, 0xb555, 0x1001, 0x9001, 0x4a3b, 0xca3b, 0x0003, 0x8003};
        const uint16_t browbf[8] = {0x3eab, 0xbeab, 0x3001, 0xb001, 0x40a3, 0xc0a3, 0x0003, 0x8003};
        const uint16_t* brow = dt == 1 ? brow16 : browbf;
        std::vector<uint16_t> xs(65536 * 8), ys(65536 * 8);
        for (int i = 0; i < 65536; ++i)
          for (int k = 0; k < 8; ++k) xs[i * 8 + k] = static_cast<uint16_t>(i);
        gelu_cuda_launch(f, static_cast<gelu_dtype_t>(dt), xs.data(), brow, 8, ys.data(), 65536 * 8, alpha, nullptr);
        for (int i = 0; i < 65536 * 8; ++i)
          bad += gelu_bound::bound_ratio(form, dt, value(xs[i]) + value(brow[i % 8]), ys[i], alpha) > 1.0;
        printf("end %+d %s %s: %ld out of bound\n", end, forms[form], dt == 1 ? "f16" : "bf16", bad);
        total += bad;
      }
      std::vector<float> x, y;
      for (uint64_t u = 0; u < 0x100000000ull; u += 257) {
        const uint32_t w = static_cast<uint32_t>(u);
        float v;
        memcpy(&v, &w, 4);
        x.push_back(v);
      }
      y.resize(x.size());
      gelu_cuda_launch(f, GELU_DTYPE_F32, x.data(), nullptr, 0, y.data(), static_cast<int64_t>(x.size()), alpha, nullptr);
      double worst = 0;
      long bad = 0;
      float at = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        uint32_t yb;
        memcpy(&yb, &y[i], 4);
        const double r = gelu_bound::bound_ratio(form, 0, x[i], yb, alpha);
        bad += r > 1.0;
        if (r > worst) worst = r, at = x[i];
      }
      printf("end %+d %s f32: worst %.3f of the bound (x = %.9g), %ld out of bound\n", end, forms[form], worst, at, bad);
      total += bad;
    }
  }
  printf("%s\n", total ? "FAIL" : "OK");
  return total ? 1 : 0;
}
