#include "gelu_ort_pool.h"

#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gelu_ort {
namespace {

class Pool {
 public:
  explicit Pool(unsigned workers) {
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  size_t size() const { return threads_.size(); }

  void run(void (*fn)(void*, size_t), void* ctx, size_t total) {
    std::lock_guard<std::mutex> one_job(job_mu_);  // one parallel-for at a time
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = fn;
      ctx_ = ctx;
      total_ = total;
      next_.store(0);
      active_ = threads_.size();
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return active_ == 0; });
  }

 private:
  void drain() {
    for (size_t i; (i = next_.fetch_add(1)) < total_;) fn_(ctx_, i);
  }
  void worker() {
    size_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      std::lock_guard<std::mutex> lk(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  void (*fn_)(void*, size_t) = nullptr;
  void* ctx_ = nullptr;
  size_t total_ = 0, active_ = 0, generation_ = 0;
  std::atomic<size_t> next_{0};
  bool stop_ = false;
};

unsigned worker_count() {
  if (const char* s = getenv("GELU_ONNX_NUM_THREADS")) {
    const long n = strtol(s, nullptr, 10);
    if (n >= 1 && n <= 1024) return static_cast<unsigned>(n - 1);
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 1 ? hc - 1 : 0;
}

}  // namespace

void pool_parallel_for(void (*fn)(void*, size_t), void* ctx, size_t total) {
  static Pool pool(worker_count());  // created on first use, joined at unload
  if (total <= 1 || pool.size() == 0) {
    for (size_t i = 0; i < total; ++i) fn(ctx, i);
    return;
  }
  pool.run(fn, ctx, total);
}

}  // namespace gelu_ort
