// A stand-in for libnvinfer, written here: the part of TensorRT's runtime a
// plugin library talks to, so the plugin links with --no-undefined and its
// IPluginV3 call sequence runs on a machine without TensorRT (CI, this
// project's machines). Compiled against TensorRT's own headers (10.0 ... 11.x);
// none of TensorRT's code is used.
//
//   getPluginRegistry()  a registry with registerCreator / getCreator /
//                        getAllCreators / deregisterCreator and loadLibrary /
//                        deregisterLibrary (dlopen, setLoggerFinder,
//                        getCreators: what IPluginRegistry::loadLibrary does)
//   getLogger()          a logger that keeps every message
//                        (nvinfer_standin_log() returns them, one per line)
//   getInferLibVersion() the headers' version
//
// Like TensorRT, loadLibrary refuses a library one of whose creators (name,
// version, namespace) is already registered, and registers none of them then.
#include <NvInferRuntime.h>
#include <NvInferVersion.h>
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

using namespace nvinfer1;

namespace {

struct Logger : ILogger {
  std::mutex mu;
  std::string text;
  void log(Severity severity, AsciiChar const* msg) noexcept override {
    try {
      std::lock_guard<std::mutex> lock(mu);
      text += std::to_string(static_cast<int>(severity)) + " " + (msg ? msg : "") + "\n";
    } catch (...) {
    }
  }
};

Logger& logger() {
  static Logger l;
  return l;
}

struct Finder : ILoggerFinder {
  ILogger* findLogger() override { return &logger(); }
};

struct Entry {
  IPluginCreatorInterface* creator;
  std::string name, version, ns;
  void* library;  // the loadLibrary handle that registered it, or nullptr
};

bool names_of(IPluginCreatorInterface& c, std::string* name, std::string* version) {
  // IPluginCreatorV3One is the creator kind TensorRT 10+ hands to the parser.
  if (std::strcmp(c.getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") != 0) return false;
  auto& v3 = static_cast<IPluginCreatorV3One&>(c);
  *name = v3.getPluginName();
  *version = v3.getPluginVersion();
  return true;
}

class Registry : public IPluginRegistry {
 public:
  bool registerCreator(IPluginCreatorInterface& creator, AsciiChar const* const pluginNamespace) noexcept override {
    return add(creator, pluginNamespace ? pluginNamespace : "", nullptr);
  }
  IPluginCreatorInterface* const* getAllCreators(int32_t* const numCreators) const noexcept override {
    list_.clear();
    for (const Entry& e : entries_) list_.push_back(e.creator);
    *numCreators = static_cast<int32_t>(list_.size());
    return list_.data();
  }
  IPluginCreatorInterface* getCreator(AsciiChar const* const name, AsciiChar const* const version,
                                      AsciiChar const* const ns = "") noexcept override {
    const Entry* e = find(name ? name : "", version ? version : "", ns ? ns : "");
    return e ? e->creator : nullptr;
  }
  bool deregisterCreator(IPluginCreatorInterface const& creator) noexcept override {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->creator == &creator) {
        entries_.erase(it);
        return true;
      }
    }
    return false;
  }
  PluginLibraryHandle loadLibrary(AsciiChar const* pluginPath) noexcept override {
    void* h = dlopen(pluginPath, RTLD_LAZY | RTLD_LOCAL);
    if (h == nullptr) {
      error(std::string("loadLibrary: ") + dlerror());
      return nullptr;
    }
    using SetFinder = void (*)(ILoggerFinder*);
    using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
    if (auto set = reinterpret_cast<SetFinder>(dlsym(h, "setLoggerFinder"))) set(&finder_);
    auto get = reinterpret_cast<GetCreators>(dlsym(h, "getCreators"));
    if (get == nullptr) {
      error(std::string("loadLibrary: ") + pluginPath + " has no getCreators");
      dlclose(h);
      return nullptr;
    }
    int32_t n = 0;
    IPluginCreatorInterface* const* cs = get(n);
    std::vector<Entry> add_list;
    for (int32_t i = 0; i < n; ++i) {
      Entry e{cs[i], "", "", "", h};
      if (!names_of(*cs[i], &e.name, &e.version)) continue;
      e.ns = static_cast<IPluginCreatorV3One*>(cs[i])->getPluginNamespace();
      if (find(e.name, e.version, e.ns) != nullptr) {  // TensorRT refuses the whole library
        error("loadLibrary: creator " + e.ns + "::" + e.name + " version " + e.version + " is already registered");
        dlclose(h);
        return nullptr;
      }
      add_list.push_back(e);
    }
    entries_.insert(entries_.end(), add_list.begin(), add_list.end());
    return h;
  }
  void deregisterLibrary(PluginLibraryHandle handle) noexcept override {
    std::vector<Entry> keep;
    for (const Entry& e : entries_)
      if (e.library != handle) keep.push_back(e);
    entries_.swap(keep);
    if (handle) dlclose(handle);
  }
  void setErrorRecorder(IErrorRecorder* const recorder) noexcept override { recorder_ = recorder; }
  IErrorRecorder* getErrorRecorder() const noexcept override { return recorder_; }
  bool isParentSearchEnabled() const override { return false; }
  void setParentSearchEnabled(bool const) override {}
  IPluginResource* acquirePluginResource(AsciiChar const*, IPluginResource*) noexcept override { return nullptr; }
  int32_t releasePluginResource(AsciiChar const*) noexcept override { return -1; }
#if NV_TENSORRT_MAJOR > 10 || (NV_TENSORRT_MAJOR == 10 && NV_TENSORRT_MINOR >= 8)
  IPluginCreatorInterface* const* getAllCreatorsRecursive(int32_t* const numCreators) noexcept override {
    return getAllCreators(numCreators);
  }
#endif
#if NV_TENSORRT_MAJOR < 11
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  // IPluginV2 creators: not used by a V3 plugin, refused.
  bool registerCreator(IPluginCreator&, AsciiChar const* const) noexcept override { return false; }
  IPluginCreator* const* getPluginCreatorList(int32_t* const numCreators) const noexcept override {
    *numCreators = 0;
    return nullptr;
  }
  IPluginCreator* getPluginCreator(AsciiChar const* const, AsciiChar const* const,
                                   AsciiChar const* const = "") noexcept override {
    return nullptr;
  }
  bool deregisterCreator(IPluginCreator const&) noexcept override { return false; }
#pragma GCC diagnostic pop
#endif

 private:
  bool add(IPluginCreatorInterface& c, const std::string& ns, void* lib) {
    Entry e{&c, "", "", ns, lib};
    if (!names_of(c, &e.name, &e.version)) return false;
    if (find(e.name, e.version, e.ns) != nullptr) return false;
    entries_.push_back(e);
    return true;
  }
  const Entry* find(const std::string& name, const std::string& version, const std::string& ns) const {
    for (const Entry& e : entries_)
      if (e.name == name && e.version == version && e.ns == ns) return &e;
    return nullptr;
  }
  static void error(const std::string& m) { logger().log(ILogger::Severity::kERROR, m.c_str()); }

  std::vector<Entry> entries_;
  mutable std::vector<IPluginCreatorInterface*> list_;
  IErrorRecorder* recorder_ = nullptr;
  Finder finder_;
};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) IPluginRegistry* getPluginRegistry() noexcept {
  static Registry r;
  return &r;
}
__attribute__((visibility("default"))) ILogger* getLogger() noexcept { return &logger(); }
__attribute__((visibility("default"))) int32_t getInferLibVersion() noexcept { return NV_TENSORRT_VERSION; }
// The stand-in's own: every message logged so far, one per line ("<severity> <text>").
__attribute__((visibility("default"))) const char* nvinfer_standin_log() noexcept { return logger().text.c_str(); }
}
