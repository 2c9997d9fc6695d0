// Serve a fused model through ONNX Runtime's C++ API, with gelu-onnx's
// custom-op library (fast kernels) or without it (the model's own local
// functions run instead: same results, no library to ship).
//
//   serve MODEL.onnx [--library libgelu_onnx_ort.so] [--dim N] [--save DIR]
//
// Every input is filled with a fixed pattern (floats: ((k * 7) % 23 - 11) / 8;
// integers: 1, i.e. token id 1, attention on, segment 1), every symbolic
// dimension is N (default 8). Prints each output's name, shape and sum;
// --save DIR writes float32 outputs as raw DIR/<output index>.f32.
#include <onnxruntime_cxx_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [--library LIB.so] [--dim N] [--save DIR]\n", argv[0]);
    return 2;
  }
  const char* model = argv[1];
  const char* library = nullptr;
  const char* save = nullptr;
  int64_t dim = 8;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--library")) library = argv[i + 1];
    else if (!std::strcmp(argv[i], "--dim")) dim = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--save")) save = argv[i + 1];
  }
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "serve");
    Ort::SessionOptions options;
    options.SetIntraOpNumThreads(1);
    // The library registers domain ai.gelu_onnx's kernels for this session
    // (C API: RegisterCustomOpsLibrary_V2). Without it ONNX Runtime inlines
    // each fused node's model-local function.
    if (library) options.RegisterCustomOpsLibrary(library);
    Ort::Session session(env, model, options);
    std::printf("library: %s\n", library ? library : "none (model-local functions)");

    Ort::AllocatorWithDefaultOptions alloc;
    Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    std::vector<Ort::AllocatedStringPtr> names;  // keeps the name strings alive
    std::vector<const char*> in_names, out_names;
    std::vector<std::vector<float>> floats;
    std::vector<std::vector<int64_t>> ints;
    std::vector<Ort::Value> inputs;
    floats.reserve(session.GetInputCount());
    ints.reserve(session.GetInputCount());
    for (size_t i = 0; i < session.GetInputCount(); ++i) {
      names.push_back(session.GetInputNameAllocated(i, alloc));
      in_names.push_back(names.back().get());
      Ort::TypeInfo type = session.GetInputTypeInfo(i);  // owns what info below points into
      auto info = type.GetTensorTypeAndShapeInfo();
      std::vector<int64_t> shape = info.GetShape();
      size_t n = 1;
      for (auto& d : shape) {
        if (d < 0) d = dim;
        n *= static_cast<size_t>(d);
      }
      switch (info.GetElementType()) {
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: {
          floats.emplace_back(n);
          for (size_t k = 0; k < n; ++k) floats.back()[k] = static_cast<float>(static_cast<int>((k * 7) % 23) - 11) / 8.0f;
          inputs.push_back(Ort::Value::CreateTensor<float>(cpu, floats.back().data(), n, shape.data(), shape.size()));
          break;
        }
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
          ints.emplace_back(n, 1);
          inputs.push_back(Ort::Value::CreateTensor<int64_t>(cpu, ints.back().data(), n, shape.data(), shape.size()));
          break;
        default:
          std::fprintf(stderr, "serve: input %s: only float32 and int64 inputs are filled here\n", in_names.back());
          return 2;
      }
    }
    for (size_t i = 0; i < session.GetOutputCount(); ++i) {
      names.push_back(session.GetOutputNameAllocated(i, alloc));
      out_names.push_back(names.back().get());
    }
    auto outputs = session.Run(Ort::RunOptions{nullptr}, in_names.data(), inputs.data(), inputs.size(),
                               out_names.data(), out_names.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      auto info = outputs[i].GetTensorTypeAndShapeInfo();
      std::string shape;
      for (int64_t d : info.GetShape()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
      if (info.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
        std::printf("%s [%s]: not float32\n", out_names[i], shape.c_str());
        continue;
      }
      const float* y = outputs[i].GetTensorData<float>();
      size_t n = info.GetElementCount();
      double sum = 0;
      for (size_t k = 0; k < n; ++k) sum += y[k];
      std::printf("%s [%s]: sum %.6g\n", out_names[i], shape.c_str(), sum);
      if (save) {
        std::ofstream f(std::string(save) + "/" + std::to_string(i) + ".f32", std::ios::binary);
        f.write(reinterpret_cast<const char*>(y), static_cast<std::streamsize>(n * sizeof(float)));
      }
    }
  } catch (const Ort::Exception& e) {
    std::fprintf(stderr, "serve: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
