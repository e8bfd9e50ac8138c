// gshmem._C, for the CPU tests: what the proxy thread asks of its network engine for a given
// sequence of descriptors, in order, with the retired word it had published at each call. The
// engine records instead of moving data, and holds its first call until every descriptor is
// queued, so the proxy takes the rest in one batch; its flushes finish at their second poll: the
// batching and the quiets' retirement are then deterministic to test (test_proxy_queue.py).
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "proxy/channel.h"
#include "proxy/net_engine.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using Trace = std::vector<std::pair<std::string, uint64_t>>;

// A one-rank-pair engine that records each operation and completes it at once.
class RecordingEngine final : public gshmem::proxy::NetEngine {
 public:
  void watch(const uint64_t* retired) { retired_ = retired; }
  // Blocks until the first operation arrived (and is held), at most `seconds`.
  void wait_held(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool arrived = cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                                      [&] { return !trace_.empty(); });
    GSHMEM_REQUIRE(arrived, "the proxy took no descriptor");
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  Trace trace() const {
    std::lock_guard<std::mutex> lock(mu_);
    return trace_;
  }

  int rank() const override { return 0; }
  int nranks() const override { return 2; }
  const char* name() const override { return "recording"; }
  int register_region(void*, size_t) override { return 0; }
  void deregister_region(int) override {}
  void barrier() override {}
  size_t region_bytes(int, int) const override { return 0; }
  void put(int, const void*, size_t, int, uint64_t, gshmem::proxy::Done done, void* arg,
           uint64_t tag, const gshmem::proxy::SignalAfter* signal) override {
    record(signal != nullptr ? "put_signal" : "put");
    if (done != nullptr) done(arg, tag);
  }
  void put_value(int, int, uint64_t, uint64_t, size_t, gshmem::proxy::Done done, void* arg,
                 uint64_t tag, const gshmem::proxy::SignalAfter* signal) override {
    record(signal != nullptr ? "put_value_signal" : "put_value");
    if (done != nullptr) done(arg, tag);
  }
  void put_inline(int, int, uint64_t, const void*, size_t, gshmem::proxy::Done done, void* arg,
                  uint64_t tag, const gshmem::proxy::SignalAfter* signal) override {
    record(signal != nullptr ? "put_inline_signal" : "put_inline");
    if (done != nullptr) done(arg, tag);
  }
  void get(int, void*, size_t, int, uint64_t, gshmem::proxy::Done done, void* arg,
           uint64_t tag) override {
    record("get");
    if (done != nullptr) done(arg, tag);
  }
  void signal(int, int, uint64_t, uint64_t, gshmem::proxy::SignalUpdate) override {
    record("signal");
  }
  void fenced_signal(int, int, uint64_t, uint64_t, gshmem::proxy::SignalUpdate) override {
    record("fenced_signal");
  }
  void atomic(int, int, uint64_t, const gshmem::proxy::Atomic&, gshmem::proxy::Fetched fetched,
              void* arg, uint64_t tag) override {
    record("atomic");
    if (fetched != nullptr) fetched(arg, tag, 0);
  }
  void set_signal_sink(gshmem::proxy::SignalSink, void*) override {}
  void set_atomic_sink(gshmem::proxy::AtomicSink*) override {}
  void set_staging(gshmem::proxy::Staging*) override {}
  void fence() override { record("fence"); }
  void flush() override { record("flush"); }
  // A flush finishes at its second poll, so a proxy that polls without blocking shows it
  // issues what comes next before a quiet retires.
  uint64_t flush_start() override {
    record("flush_start");
    polls_.push_back(0);
    return polls_.size() - 1;
  }
  bool flushed(uint64_t token) override {
    GSHMEM_REQUIRE(token < polls_.size() && polls_[token] < 2, "flush token spent or unknown");
    if (++polls_[token] < 2) return false;
    record("flushed");
    return true;
  }
  bool progress() override { return false; }
  bool busy() const override { return false; }

 private:
  void record(const char* op) {
    std::unique_lock<std::mutex> lock(mu_);
    trace_.emplace_back(op, __atomic_load_n(retired_, __ATOMIC_ACQUIRE));
    cv_.notify_all();
    cv_.wait(lock, [&] { return !held_; });
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = true;
  const uint64_t* retired_ = nullptr;
  Trace trace_;
  std::vector<int> polls_;  // per flush token (proxy thread only)
};

// The engine calls the proxy makes for descriptors of `ops` (codes of PROXY_OPS, to PE 1,
// region 0), the first taken alone and the rest as one batch; and the final retired count.
std::pair<Trace, uint64_t> proxy_trace(const std::vector<int>& ops) {
  return gshmem::python::call_internal([&] {
    GSHMEM_REQUIRE(!ops.empty() && ops.size() <= 64, "1 to 64 descriptors");
    RecordingEngine engine;
    gshmem::proxy::ProxyChannel channel(engine, 64, 0, gshmem::proxy::Producers::kHost, -1);
    engine.watch(channel.completion().retired);
    const uint64_t source = 0;  // what an inline put's descriptor carries
    for (size_t i = 0; i < ops.size(); ++i) {
      gshmem::proxy::Command c;
      c.op = static_cast<gshmem::proxy::Op>(ops[i]);
      c.pe = 1;
      c.local = reinterpret_cast<uint64_t>(&source);
      c.bytes = 8;
      GSHMEM_REQUIRE(channel.try_push(c).has_value(), "the queue has room for every descriptor");
      if (i == 0) engine.wait_held(10.0);
    }
    engine.release();
    channel.wait_retired(ops.size(), 10.0);
    channel.stop();
    return std::make_pair(engine.trace(), channel.retired());
  });
}

}  // namespace

void bind_proxy_trace(nb::module_& m) {
  m.def("proxy_trace", &proxy_trace, "ops"_a,
        "The network engine's calls (op, retired word at the call) that the proxy thread makes "
        "for these descriptors (PROXY_OPS codes), the first taken alone and the rest in one "
        "batch; and the final retired count.");
}
