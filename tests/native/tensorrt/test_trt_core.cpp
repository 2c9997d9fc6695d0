// Tests of the TensorRT-free plugin core (no TensorRT, no GPU needed).
//   gelu_trt_core_test               run every check; exit 0 when all pass
//   gelu_trt_core_test --table-json  print the op table (tests/test_trt_core.py
//                                    compares it with gelu_onnx/contract.py)
// Built with GELU_TRT_CORE_TEST_WITH_KERNELS=1 it also pushes launch_args()
// through the shared CPU kernels and compares with a float64 reference, which
// proves the form / dtype / bias / alpha dispatch end to end.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "gelu_contract.h"
#include "gelu_trt_core.h"

using namespace gelu_trt;

namespace {

// An error whose message mentions `word` (so the user is told what is wrong).
#define CHECK_ERR(status, word)                                                        \
  do {                                                                                 \
    const Status _s = (status);                                                        \
    ++g_checks;                                                                        \
    if (_s.ok() || _s.message().find(word) == std::string::npos) {                     \
      ++g_failures;                                                                    \
      std::fprintf(stderr, "FAIL %s:%d: expected an error mentioning '%s', got '%s'\n", \
                   __FILE__, __LINE__, word, _s.ok() ? "<ok>" : _s.message().c_str()); \
    }                                                                                  \
  } while (0)

const OpInfo& op(const char* name) {
  const OpInfo* o = find_op(name);
  if (o == nullptr) {
    std::fprintf(stderr, "op %s missing\n", name);
    std::exit(2);
  }
  return *o;
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

void test_table() {
  CHECK(op_table().size() == 6);
  struct Row { const char* name; Form form; bool bias; };
  const Row rows[] = {
      {GELU_ONNX_OP_GELU_ERF, Form::kErf, false},         {GELU_ONNX_OP_GELU_TANH, Form::kTanh, false},
      {GELU_ONNX_OP_GELU_SIGMOID, Form::kSigmoid, false}, {GELU_ONNX_OP_BIAS_GELU_ERF, Form::kErf, true},
      {GELU_ONNX_OP_BIAS_GELU_TANH, Form::kTanh, true},   {GELU_ONNX_OP_BIAS_GELU_SIGMOID, Form::kSigmoid, true},
  };
  for (const Row& r : rows) {
    const OpInfo* o = find_op(r.name);
    CHECK(o != nullptr && o->form == r.form && o->bias == r.bias);
  }
  CHECK(find_op("Gelu") == nullptr);
  CHECK(find_op("geluerf") == nullptr);
  CHECK(find_op("") == nullptr);
  CHECK(std::string(form_name(Form::kErf)) == "erf");
  CHECK(std::string(form_name(Form::kTanh)) == "tanh");
  CHECK(std::string(form_name(Form::kSigmoid)) == "sigmoid");
  // Form values are the kernel ABI's gelu_form_t.
  CHECK(static_cast<int>(Form::kErf) == GELU_FORM_ERF && static_cast<int>(Form::kTanh) == GELU_FORM_TANH &&
        static_cast<int>(Form::kSigmoid) == GELU_FORM_SIGMOID);
  for (const OpInfo& o : op_table()) {
    const auto f = advertised_fields(o);
    if (o.form == Form::kSigmoid) {
      CHECK(f.size() == 1 && std::string(f[0].name) == GELU_ONNX_ATTR_ALPHA && f[0].type == FieldType::kFLOAT32 &&
            f[0].length == 1);
    } else {
      CHECK(f.empty());
    }
  }
}

void test_fields() {
  Params p;
  CHECK(params_from_fields(op("GeluErf"), nullptr, 0, &p).ok());
  CHECK(p.form == Form::kErf && !p.bias && p.alpha == 0.0f);
  CHECK(params_from_fields(op("BiasGeluTanh"), nullptr, 0, &p).ok());
  CHECK(p.form == Form::kTanh && p.bias);
  // alpha defaults to 1.702 (QuickGELU) for the sigmoid forms
  CHECK(params_from_fields(op("GeluSigmoid"), nullptr, 0, &p).ok());
  CHECK(p.form == Form::kSigmoid && p.alpha == 1.702f);

  // exactly as TensorRT's ONNX parser delivers a FLOAT attribute
  const float a32 = 1.5f;
  Field f{"alpha", &a32, FieldType::kFLOAT32, 1};
  CHECK(params_from_fields(op("BiasGeluSigmoid"), &f, 1, &p).ok());
  CHECK(p.alpha == 1.5f && p.bias);
  const double a64 = 1.625;
  f = {"alpha", &a64, FieldType::kFLOAT64, 1};
  CHECK(params_from_fields(op("GeluSigmoid"), &f, 1, &p).ok() && p.alpha == 1.625f);
  const uint16_t a16 = 0x3E00;  // 1.5 in IEEE half
  f = {"alpha", &a16, FieldType::kFLOAT16, 1};
  CHECK(params_from_fields(op("GeluSigmoid"), &f, 1, &p).ok() && p.alpha == 1.5f);

  // an unrelated field is ignored (hand-built collections may carry extras)
  const char ns[] = "ai.gelu_onnx";
  Field two[2] = {{"plugin_namespace", ns, FieldType::kCHAR, static_cast<int32_t>(sizeof ns)},
                  {"alpha", &a32, FieldType::kFLOAT32, 1}};
  CHECK(params_from_fields(op("GeluSigmoid"), two, 2, &p).ok() && p.alpha == 1.5f);
  CHECK(params_from_fields(op("GeluErf"), two, 1, &p).ok());

  // bad inputs: one sentence each
  const int32_t i32 = 2;
  f = {"alpha", &i32, FieldType::kINT32, 1};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "FLOAT");
  const float pair[2] = {1.0f, 2.0f};
  f = {"alpha", pair, FieldType::kFLOAT32, 2};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "exactly one");
  const float nan = std::nanf("");
  f = {"alpha", &nan, FieldType::kFLOAT32, 1};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "finite");
  const float inf = INFINITY;
  f = {"alpha", &inf, FieldType::kFLOAT32, 1};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "finite");
  const double big = 1e300;
  f = {"alpha", &big, FieldType::kFLOAT64, 1};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "finite");
  f = {"alpha", &a32, FieldType::kFLOAT32, 1};
  CHECK_ERR(params_from_fields(op("GeluErf"), &f, 1, &p), "only valid for the sigmoid");
  CHECK_ERR(params_from_fields(op("BiasGeluTanh"), &f, 1, &p), "only valid for the sigmoid");
  Field twice[2] = {f, f};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), twice, 2, &p), "twice");
  f = {nullptr, &a32, FieldType::kFLOAT32, 1};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "no name");
  f = {"alpha", nullptr, FieldType::kFLOAT32, 1};
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, 1, &p), "no data");
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), nullptr, 1, &p), "malformed");
  CHECK_ERR(params_from_fields(op("GeluSigmoid"), &f, -1, &p), "malformed");
}

void test_serialization() {
  // Golden bytes, written out by hand: "GELU", version 1 (LE), form 2, bias
  // flag, then 1.5f = 0x3FC00000 little-endian.
  Params p{Form::kSigmoid, true, 1.5f};
  const std::vector<uint8_t> golden = {'G', 'E', 'L', 'U', 1, 0, 2, 1, 0x00, 0x00, 0xC0, 0x3F};
  CHECK(serialize(p) == golden);
  CHECK(serialize(p).size() == kStateSize);

  for (const OpInfo& o : op_table()) {
    for (float alpha : {1.702f, 1.5f, -0.25f, 1e-30f}) {
      Params in{o.form, o.bias, o.form == Form::kSigmoid ? alpha : 0.0f};
      const auto blob = serialize(in);
      Params out;
      CHECK(deserialize(blob.data(), blob.size(), &out).ok());
      CHECK(out.form == in.form && out.bias == in.bias && bits(out.alpha) == bits(in.alpha));
      Field f{kStateFieldName, blob.data(), FieldType::kUNKNOWN, static_cast<int32_t>(blob.size())};
      Params via;
      CHECK(params_from_serialized_fields(o, &f, 1, &via).ok());
      CHECK(via.form == in.form && via.bias == in.bias && bits(via.alpha) == bits(in.alpha));
      // the blob of one op is refused by every other op's creator
      for (const OpInfo& other : op_table()) {
        if (&other == &o) continue;
        CHECK_ERR(params_from_serialized_fields(other, &f, 1, &via), "not ");
      }
    }
  }

  Params out;
  for (size_t n = 0; n < kStateSize; ++n) CHECK(!deserialize(golden.data(), n, &out).ok());
  std::vector<uint8_t> longer = golden;
  longer.push_back(0);
  CHECK_ERR(deserialize(longer.data(), longer.size(), &out), "expected 12");
  CHECK_ERR(deserialize(nullptr, 12, &out), "missing");
  auto bad = golden;
  bad[0] = 'X';
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "magic");
  bad = golden;
  bad[4] = 2;
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "version 2");
  bad = golden;
  bad[5] = 1;  // version 257: also foreign
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "version 257");
  bad = golden;
  bad[6] = 3;
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "form");
  bad = golden;
  bad[7] = 0x3;
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "flags");
  bad = golden;
  bad[10] = 0xC0;
  bad[11] = 0x7F;  // 0x7FC00000: NaN
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "non-finite");
  bad = serialize(Params{Form::kErf, false, 0.0f});
  bad[11] = 0x3F;  // alpha on an erf state
  CHECK_ERR(deserialize(bad.data(), bad.size(), &out), "non-sigmoid");

  // garbage never crashes and anything accepted is canonical
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> g(rng() % 20);
    for (auto& c : g) c = static_cast<uint8_t>(rng());
    if (i % 2 == 0 && g.size() >= 6) {  // make half of them get past the header checks
      std::memcpy(g.data(), "GELU\x01\x00", 6);
      if (i % 4 == 0) g.resize(kStateSize, 0);
    }
    // copy into an exactly-sized heap buffer so ASan / valgrind would flag over-reads
    std::unique_ptr<uint8_t[]> buf(new uint8_t[g.size() ? g.size() : 1]);
    if (!g.empty()) std::memcpy(buf.get(), g.data(), g.size());
    Params q;
    if (deserialize(buf.get(), g.size(), &q).ok()) {
      ++accepted;
      CHECK(serialize(q) == g);
    }
  }
  CHECK(accepted > 0);

  const auto blob = serialize(Params{Form::kErf, false, 0.0f});
  Params via;
  Field wrong_type{kStateFieldName, blob.data(), FieldType::kINT32, 3};
  CHECK_ERR(params_from_serialized_fields(op("GeluErf"), &wrong_type, 1, &via), "raw bytes");
  Field other{"alpha", blob.data(), FieldType::kUNKNOWN, 12};
  CHECK_ERR(params_from_serialized_fields(op("GeluErf"), &other, 1, &via), "lack");
  CHECK_ERR(params_from_serialized_fields(op("GeluErf"), nullptr, 0, &via), "lack");
}

void test_formats() {
  const DType good[] = {DType::kFLOAT, DType::kHALF, DType::kBF16};
  const DType bad[] = {DType::kINT8, DType::kINT32, DType::kBOOL, DType::kUINT8, DType::kFP8, DType::kINT64};
  for (const OpInfo& o : op_table()) {
    Params p{o.form, o.bias, 0.0f};
    const int32_t nin = o.bias ? 2 : 1;
    CHECK(nb_inputs(p) == nin);
    for (DType t : good) {
      std::vector<TensorTypeFormat> io(nin + 1, TensorTypeFormat{t, kFormatLinear});
      for (int32_t pos = 0; pos < nin + 1; ++pos) CHECK(supports_format_combination(p, pos, io.data(), nin, 1));
      io[0].format = 1;  // e.g. kCHW2
      CHECK(!supports_format_combination(p, 0, io.data(), nin, 1));
      io[0].format = kFormatLinear;
      io[nin].format = 3;
      CHECK(!supports_format_combination(p, nin, io.data(), nin, 1));
      io[nin].format = kFormatLinear;
      for (DType other : good) {
        if (other == t) continue;
        io[nin].type = other;  // Y must have X's type
        CHECK(!supports_format_combination(p, nin, io.data(), nin, 1));
        if (o.bias) {
          io[1].type = other;  // so must the bias
          CHECK(!supports_format_combination(p, 1, io.data(), nin, 1));
          io[1].type = t;
        }
        io[nin].type = t;
      }
      CHECK(!supports_format_combination(p, -1, io.data(), nin, 1));
      CHECK(!supports_format_combination(p, nin + 1, io.data(), nin, 1));
      CHECK(!supports_format_combination(p, 0, io.data(), nin + 1, 1));
      CHECK(!supports_format_combination(p, 0, io.data(), nin, 2));
      CHECK(!supports_format_combination(p, 0, nullptr, nin, 1));

      DType in_types[2] = {t, t};
      DType out = DType::kINT8;
      CHECK(output_types(p, in_types, nin, &out, 1).ok() && out == t);
    }
    for (DType t : bad) {
      std::vector<TensorTypeFormat> io(nin + 1, TensorTypeFormat{t, kFormatLinear});
      CHECK(!supports_format_combination(p, 0, io.data(), nin, 1));
      DType in_types[2] = {t, t};
      DType out;
      CHECK_ERR(output_types(p, in_types, nin, &out, 1), "float32, float16 or bfloat16");
      gelu_dtype_t k;
      CHECK_ERR(to_kernel_dtype(t, &k), "no GELU kernel");
    }
    if (o.bias) {
      DType mixed[2] = {DType::kHALF, DType::kFLOAT};
      DType out;
      CHECK_ERR(output_types(p, mixed, 2, &out, 1), "bias must have X's data type");
    }
    DType one[2] = {DType::kFLOAT, DType::kFLOAT};
    DType out;
    CHECK_ERR(output_types(p, one, o.bias ? 1 : 2, &out, 1), "input(s)");
  }
  gelu_dtype_t k;
  CHECK(to_kernel_dtype(DType::kFLOAT, &k).ok() && k == GELU_DTYPE_F32);
  CHECK(to_kernel_dtype(DType::kHALF, &k).ok() && k == GELU_DTYPE_F16);
  CHECK(to_kernel_dtype(DType::kBF16, &k).ok() && k == GELU_DTYPE_BF16);
}

void test_shapes() {
  Params nb{Form::kErf, false, 0.0f};
  Params wb{Form::kTanh, true, 0.0f};
  const int64_t x3[] = {2, 5, 8}, b8[] = {8}, b7[] = {7}, dyn3[] = {-1, -1, -1}, dynb[] = {-1}, b2d[] = {1, 8};
  Shape s0{0, nullptr};
  CHECK(check_shapes(nb, &s0, 1).ok());  // a scalar GELU is fine without bias
  Shape one[1] = {{3, x3}};
  CHECK(check_shapes(nb, one, 1).ok());
  Shape ok[2] = {{3, x3}, {1, b8}};
  CHECK(check_shapes(wb, ok, 2).ok());
  Shape dyn[2] = {{3, dyn3}, {1, b8}};
  CHECK(check_shapes(wb, dyn, 2).ok());
  Shape dyn2[2] = {{3, x3}, {1, dynb}};
  CHECK(check_shapes(wb, dyn2, 2).ok());
  Shape mism[2] = {{3, x3}, {1, b7}};
  CHECK_ERR(check_shapes(wb, mism, 2), "bias length 7 differs from X's last dimension 8");
  Shape rank2[2] = {{3, x3}, {2, b2d}};
  CHECK_ERR(check_shapes(wb, rank2, 2), "1-D");
  Shape scalar[2] = {{0, nullptr}, {1, b8}};
  CHECK_ERR(check_shapes(wb, scalar, 2), "rank >= 1");
  CHECK_ERR(check_shapes(wb, one, 1), "expected 2 input(s)");
  CHECK_ERR(check_shapes(nb, ok, 2), "expected 1 input(s)");

  LaunchArgs a;
  Params sig{Form::kSigmoid, true, 1.75f};
  CHECK(launch_args(sig, DType::kHALF, ok, 2, &a).ok());
  CHECK(a.form == GELU_FORM_SIGMOID && a.dtype == GELU_DTYPE_F16 && a.n == 80 && a.bias_len == 8 && a.alpha == 1.75f);
  CHECK(launch_args(nb, DType::kBF16, one, 1, &a).ok());
  CHECK(a.form == GELU_FORM_ERF && a.dtype == GELU_DTYPE_BF16 && a.n == 80 && a.bias_len == 0);
  CHECK(launch_args(nb, DType::kFLOAT, &s0, 1, &a).ok() && a.n == 1);
  const int64_t empty[] = {4, 0}, b0[] = {0};
  Shape emp[2] = {{2, empty}, {1, b0}};
  CHECK(launch_args(wb, DType::kFLOAT, emp, 2, &a).ok() && a.n == 0);
  CHECK_ERR(launch_args(wb, DType::kFLOAT, dyn, 2, &a), "unresolved");
  CHECK_ERR(launch_args(wb, DType::kFLOAT, dyn2, 2, &a), "unresolved");
  CHECK_ERR(launch_args(nb, DType::kINT32, one, 1, &a), "no GELU kernel");
  const int64_t huge[] = {int64_t(1) << 40, int64_t(1) << 40};
  Shape hs[1] = {{2, huge}};
  CHECK_ERR(launch_args(nb, DType::kFLOAT, hs, 1, &a), "int64");
  CHECK_ERR(launch_args(wb, DType::kFLOAT, mism, 2, &a), "differs");
}

void test_describe() {
  CHECK(describe(op("GeluErf"), Params{Form::kErf, false, 0.0f}) == "GeluErf");
  CHECK(describe(op("BiasGeluSigmoid"), Params{Form::kSigmoid, true, 1.5f}) == "BiasGeluSigmoid(alpha=1.5)");
}

#if defined(GELU_TRT_CORE_TEST_WITH_KERNELS) && GELU_TRT_CORE_TEST_WITH_KERNELS
// float64 references, written independently of the kernels.
double ref(Form f, double v, double alpha) {
  switch (f) {
    case Form::kErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case Form::kTanh: {
      const double k = std::sqrt(2.0 / std::acos(-1.0));
      return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
    }
    case Form::kSigmoid: return v / (1.0 + std::exp(-alpha * v));
  }
  return 0.0;
}
// Test values are multiples of 1/16 in [-4, 4): exact in fp16 and bf16.
uint16_t to_half(float v) {  // exact for such values (normal range, <= 11 significant bits)
  if (v == 0.0f) return 0;
  const uint32_t u = bits(v);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((u >> 13) & 0x3ffu));
}
float from_half(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const double mant = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024.0 + mant, exp - 25);
  return static_cast<float>((h & 0x8000) ? -mag : mag);  // no inf/NaN expected here
}
uint16_t to_bf16(float v) { return static_cast<uint16_t>(bits(v) >> 16); }
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

void test_dispatch_through_cpu_kernels() {
  const int64_t rows = 3, cols = 16;
  const int64_t xd[] = {rows, cols}, bd[] = {cols};
  std::vector<float> x(rows * cols), bias(cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = static_cast<float>((i * 37) % 128 - 64) / 16.0f;
  for (int64_t j = 0; j < cols; ++j) bias[j] = static_cast<float>(j % 5 - 2) / 16.0f;
  for (const OpInfo& o : op_table()) {
    for (DType t : {DType::kFLOAT, DType::kHALF, DType::kBF16}) {
      Params p;
      const float alpha = 1.625f;
      Field f{"alpha", &alpha, FieldType::kFLOAT32, 1};
      CHECK(params_from_fields(o, &f, o.form == Form::kSigmoid ? 1 : 0, &p).ok());
      Shape in[2] = {{2, xd}, {1, bd}};
      LaunchArgs a;
      CHECK(launch_args(p, t, in, o.bias ? 2 : 1, &a).ok());
      const double tol = t == DType::kFLOAT ? 1e-5 : (t == DType::kHALF ? 2e-3 : 1.6e-2);
      std::vector<uint16_t> x16(x.size()), b16(bias.size()), y16(x.size());
      std::vector<float> y32(x.size());
      const void* xp = x.data();
      const void* bp = o.bias ? bias.data() : nullptr;
      void* yp = y32.data();
      if (t != DType::kFLOAT) {
        for (size_t i = 0; i < x.size(); ++i) x16[i] = t == DType::kHALF ? to_half(x[i]) : to_bf16(x[i]);
        for (size_t i = 0; i < bias.size(); ++i) b16[i] = t == DType::kHALF ? to_half(bias[i]) : to_bf16(bias[i]);
        xp = x16.data();
        bp = o.bias ? b16.data() : nullptr;
        yp = y16.data();
      }
      const gelu_status_t st = gelu_cpu_range(a.form, a.dtype, xp, bp, a.bias_len, yp, 0, a.n, a.alpha);
      CHECK(st == GELU_OK);
      double worst = 0.0;
      for (int64_t i = 0; i < a.n; ++i) {
        const double v = static_cast<double>(x[i]) + (o.bias ? bias[i % cols] : 0.0f);
        const double want = ref(o.form, v, alpha);
        const double got = t == DType::kFLOAT ? y32[i] : (t == DType::kHALF ? from_half(y16[i]) : from_bf16(y16[i]));
        worst = std::fmax(worst, std::fabs(got - want) / std::fmax(1.0, std::fabs(want)));
      }
      if (!(worst <= tol)) std::fprintf(stderr, "%s dtype %d: max rel err %g > %g\n", o.op_type, int(t), worst, tol);
      CHECK(worst <= tol);
    }
  }
}
#endif

void print_table_json() {
  std::printf("{\"domain\": \"%s\", \"opset_version\": %d, \"plugin_version\": \"%s\", ", GELU_ONNX_DOMAIN,
              GELU_ONNX_OPSET_VERSION, GELU_ONNX_OPSET_VERSION_STR);
  std::printf("\"attr_alpha\": \"%s\", \"quick_gelu_alpha\": %.9g, \"state_version\": %d, ", GELU_ONNX_ATTR_ALPHA,
              static_cast<double>(GELU_ONNX_QUICK_GELU_ALPHA), static_cast<int>(kStateVersion));
  std::printf("\"with_kernels\": %s, \"ops\": [",
#if defined(GELU_TRT_CORE_TEST_WITH_KERNELS) && GELU_TRT_CORE_TEST_WITH_KERNELS
              "true"
#else
              "false"
#endif
  );
  bool first = true;
  for (const OpInfo& o : op_table()) {
    std::printf("%s{\"op_type\": \"%s\", \"form\": \"%s\", \"bias\": %s, \"fields\": [", first ? "" : ", ",
                o.op_type, form_name(o.form), o.bias ? "true" : "false");
    bool ff = true;
    for (const FieldSpec& f : advertised_fields(o)) {
      std::printf("%s\"%s\"", ff ? "" : ", ", f.name);
      ff = false;
    }
    std::printf("]}");
    first = false;
  }
  std::printf("]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--table-json") == 0) {
    print_table_json();
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s [--table-json]\n", argv[0]);
    return 2;
  }
  test_table();
  test_fields();
  test_serialization();
  test_formats();
  test_shapes();
  test_describe();
#if defined(GELU_TRT_CORE_TEST_WITH_KERNELS) && GELU_TRT_CORE_TEST_WITH_KERNELS
  test_dispatch_through_cpu_kernels();
#endif
  return check_summary();
}
