// gshmem._C, proxy part, for the CPU tests: the descriptor queue (src/proxy/descriptor_queue.h)
// with host memory and host threads as producers (a queue to drive step by step, and a stress
// run of many producers against one consumer that checks every descriptor); the network engine
// (src/proxy/net_engine.h) on a test bootstrap, its arrivals applied by the host or, as a comm's
// are, by kernels; and a proxy thread fed by host threads or kernels.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/cuda_api.h"
#include "common/env.h"
#include "proxy/channel.h"
#include "proxy/descriptor_queue.h"
#include "proxy/gpu_sink.h"
#include "proxy/net_engine.h"
#include "proxy/staging.h"
#include "python/ext_bootstrap.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;
using gshmem::python::call_internal;
using gshmem::proxy::Descriptor;
using gshmem::proxy::kPayloadWords;

namespace {

// Host-memory storage for one queue.
class HostQueue {
 public:
  explicit HostQueue(uint64_t capacity) {
    if (!gshmem::proxy::valid_capacity(capacity)) {
      gshmem::python::raise(GSHMEM_ERROR_USAGE,
                            "a queue's capacity must be a power of two >= 2, got " +
                                std::to_string(capacity));
    }
    slots_ = std::make_unique<Descriptor[]>(capacity);
    for (uint64_t i = 0; i < capacity; ++i) slots_[i] = Descriptor{};
    view_ = {slots_.get(), &tail_, &head_, capacity};
  }
  const gshmem::proxy::QueueView& view() const { return view_; }

  bool try_push(const std::vector<uint64_t>& words) {
    if (words.size() != kPayloadWords) {
      gshmem::python::raise(GSHMEM_ERROR_USAGE, "a descriptor carries 7 words");
    }
    uint64_t ticket = 0;
    if (!gshmem::proxy::try_reserve(view_, ticket)) return false;
    uint64_t w[kPayloadWords];
    for (size_t i = 0; i < kPayloadWords; ++i) w[i] = words[i];
    gshmem::proxy::publish(view_, ticket, w);
    return true;
  }

  std::optional<std::vector<uint64_t>> try_pop() {
    uint64_t w[kPayloadWords];
    if (!gshmem::proxy::try_pop(view_, next_, w)) return std::nullopt;
    return std::vector<uint64_t>(w, w + kPayloadWords);
  }

  uint64_t& next() { return next_; }

 private:
  std::unique_ptr<Descriptor[]> slots_;
  alignas(64) uint64_t tail_ = 0;
  alignas(64) uint64_t head_ = 0;
  uint64_t next_ = 0;
  gshmem::proxy::QueueView view_{};
};

uint64_t mix(uint64_t x) {  // splitmix64: payload words a torn or stale read cannot fake
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// `producers` threads each publish `count` descriptors {producer, index, mix(...) x 5}; one
// consumer takes all of them and checks each: payload intact, every producer's indices in order,
// none lost or repeated. Returns what happened; raises on the first wrong descriptor, or when
// nothing arrives for 10 s (a lost descriptor would otherwise stall the consumer forever).
nb::dict stress(int producers, uint64_t count, uint64_t capacity) {
  if (producers < 1 || producers > 256) {
    gshmem::python::raise(GSHMEM_ERROR_USAGE, "producers must be in [1, 256]");
  }
  HostQueue q(capacity);
  std::atomic<uint64_t> full{0};
  std::atomic<bool> stop{false};
  std::string error;
  uint64_t popped = 0;
  std::vector<uint64_t> expect(producers, 0);  // each producer's next index
  {
    nb::gil_scoped_release release;
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&, p] {
        for (uint64_t i = 0; i < count; ++i) {
          uint64_t w[kPayloadWords] = {static_cast<uint64_t>(p), i};
          for (size_t k = 2; k < kPayloadWords; ++k) w[k] = mix(p * 1000003ull + i * 7 + k);
          uint64_t ticket = 0;
          while (!gshmem::proxy::try_reserve(q.view(), ticket)) {
            if (stop.load(std::memory_order_relaxed)) return;
            full.fetch_add(1, std::memory_order_relaxed);
            std::this_thread::yield();
          }
          gshmem::proxy::publish(q.view(), ticket, w);
        }
      });
    }
    const uint64_t total = count * static_cast<uint64_t>(producers);
    auto last = std::chrono::steady_clock::now();
    while (popped < total && error.empty()) {
      uint64_t w[kPayloadWords];
      if (!gshmem::proxy::try_pop(q.view(), q.next(), w)) {
        if (std::chrono::steady_clock::now() - last > std::chrono::seconds(10)) {
          error = "no descriptor for 10 s after " + std::to_string(popped);
        }
        std::this_thread::yield();
        continue;
      }
      last = std::chrono::steady_clock::now();
      ++popped;
      const uint64_t p = w[0], i = w[1];
      if (p >= static_cast<uint64_t>(producers) || i != expect[p]) {
        error = "descriptor " + std::to_string(popped) + " is (" + std::to_string(p) + ", " +
                std::to_string(i) + "), out of order or unknown";
        break;
      }
      for (size_t k = 2; k < kPayloadWords; ++k) {
        if (w[k] != mix(p * 1000003ull + i * 7 + k)) error = "a torn descriptor";
      }
      ++expect[p];
    }
    stop.store(true);  // producers still waiting for room give up, so the threads can be joined
    for (auto& t : threads) t.join();
  }
  if (!error.empty()) gshmem::python::raise(GSHMEM_ERROR_SYSTEM, "descriptor queue: " + error);
  nb::dict d;
  d["popped"] = popped;
  d["per_producer"] = expect;  // how many of each producer's descriptors came out, in order
  d["full_waits"] = full.load();
  return d;
}

// Staging for tests on host memory: stages every buffer through two chunks per direction of
// `chunk` bytes (memcpy), so the CPU tests drive the staged protocol (parts, chunk pools that
// run dry) that a comm uses for GPU memory.
class HostTestStaging final : public gshmem::proxy::Staging {
 public:
  explicit HostTestStaging(size_t chunk) : Staging(chunk) {
    for (int direction = 0; direction < 2; ++direction) {
      for (int i = 0; i < 2; ++i) {
        all_.emplace_back(chunk);
        add_chunk(all_.back().data(), direction == 0);
      }
    }
  }
  bool staged(const void*) const override { return true; }
  // Complete at once, but seen complete only at the second look: the engine's waiting for a
  // copy is exercised too.
  void start_copy(void* chunk, void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    looks_[chunk] = 0;
  }
  bool copied(void* chunk) override { return ++looks_[chunk] > 1; }

 private:
  std::list<std::vector<char>> all_;
  std::map<void*, int> looks_;
};

// The network engine on a test bootstrap (which must outlive it). Addresses are plain integers:
// the tests use numpy arrays' host memory.
class EngineHandle {
 public:
  EngineHandle(gshmem::python::BootstrapHandle& bs, std::optional<double> timeout,
               std::optional<size_t> bulk_bytes, std::optional<size_t> staging_chunk,
               std::optional<size_t> part_bytes, bool local_shm,
               std::optional<int> gpu_sink_device) {
    const double t = timeout.value_or(bs.timeout());
    const size_t bulk = bulk_bytes.value_or(gshmem::proxy::kDefaultBulkBytes);
    const size_t part = part_bytes.value_or(gshmem::proxy::kDefaultPartBytes);
    if (staging_chunk) staging_ = std::make_unique<HostTestStaging>(*staging_chunk);
    engine_ = call_internal(
        [&] { return gshmem::proxy::make_ucx_engine(bs.bs(), t, bulk, part, local_shm); });
    if (staging_) engine_->set_staging(staging_.get());
    if (gpu_sink_device) {  // arrivals applied by kernels, as a comm's are (src/proxy/gpu_sink.h)
      sink_ = call_internal(
          [&] { return std::make_unique<gshmem::proxy::GpuSink>(*gpu_sink_device); });
      sink_->serve(*engine_);
    }
  }
  gshmem::proxy::NetEngine& engine() {
    if (!engine_) gshmem::python::raise(GSHMEM_ERROR_USAGE, "this network engine is closed");
    return *engine_;
  }
  int register_region(uintptr_t base, size_t bytes) {
    void* p = reinterpret_cast<void*>(base);
    return call_internal([&] { return engine().register_region(p, bytes); });
  }
  void deregister_region(int region) {
    call_internal([&] { engine().deregister_region(region); });
  }
  size_t region_bytes(int region, int pe) {
    return call_internal([&] { return engine().region_bytes(region, pe); });
  }
  void put(int pe, uintptr_t src, size_t bytes, int region, uint64_t offset) {
    call_internal([&] {
      engine().put(pe, reinterpret_cast<const void*>(src), bytes, region, offset, nullptr,
                   nullptr, 0, nullptr);
    });
  }
  void put_signal(int pe, uintptr_t src, size_t bytes, int region, uint64_t offset,
                  int signal_region, uint64_t signal_offset, uint64_t value, bool set) {
    const gshmem::proxy::SignalAfter signal{signal_region, signal_offset, value, update_of(set)};
    call_internal([&] {
      engine().put(pe, reinterpret_cast<const void*>(src), bytes, region, offset, nullptr,
                   nullptr, 0, &signal);
    });
  }
  void put_value(int pe, uint64_t value, size_t bytes, int region, uint64_t offset,
                 std::optional<int> signal_region, uint64_t signal_offset, uint64_t signal_value,
                 bool set) {
    const auto signal = signal_after(signal_region, signal_offset, signal_value, set);
    call_internal([&] {
      engine().put_value(pe, region, offset, value, bytes, nullptr, nullptr, 0,
                         signal ? &*signal : nullptr);
    });
  }
  void put_inline(int pe, uintptr_t src, size_t bytes, int region, uint64_t offset,
                  std::optional<int> signal_region, uint64_t signal_offset, uint64_t signal_value,
                  bool set) {
    const auto signal = signal_after(signal_region, signal_offset, signal_value, set);
    call_internal([&] {
      engine().put_inline(pe, region, offset, reinterpret_cast<const void*>(src), bytes, nullptr,
                          nullptr, 0, signal ? &*signal : nullptr);
    });
  }
  void get(int pe, uintptr_t dst, size_t bytes, int region, uint64_t offset) {
    call_internal([&] {
      engine().get(pe, reinterpret_cast<void*>(dst), bytes, region, offset, nullptr, nullptr, 0);
    });
  }
  void signal(int pe, int region, uint64_t offset, uint64_t value, bool set, bool fenced) {
    const gshmem::proxy::SignalUpdate update = update_of(set);
    call_internal([&] {
      if (fenced) {
        engine().fenced_signal(pe, region, offset, value, update);
      } else {
        engine().signal(pe, region, offset, value, update);
      }
    });
  }
  void fence() { call_internal([&] { engine().fence(); }); }
  void barrier() { call_internal([&] { engine().barrier(); }); }
  void flush() { call_internal([&] { engine().flush(); }); }
  uint64_t flush_start() { return call_internal([&] { return engine().flush_start(); }); }
  bool flushed(uint64_t token) {
    return call_internal([&] { return engine().flushed(token); });
  }
  bool progress() { return call_internal([&] { return engine().progress(); }); }
  void close() {
    engine_.reset();
    sink_.reset();
  }

 private:
  static gshmem::proxy::SignalUpdate update_of(bool set) {
    return set ? gshmem::proxy::SignalUpdate::kSet : gshmem::proxy::SignalUpdate::kAdd;
  }
  // The signal a value or inline put carries, when the caller names its region.
  static std::optional<gshmem::proxy::SignalAfter> signal_after(std::optional<int> region,
                                                                uint64_t offset, uint64_t value,
                                                                bool set) {
    if (!region) return std::nullopt;
    return gshmem::proxy::SignalAfter{*region, offset, value, update_of(set)};
  }

  std::unique_ptr<HostTestStaging> staging_;       // outlives the engine
  std::unique_ptr<gshmem::proxy::GpuSink> sink_;   // outlives the engine
  std::unique_ptr<gshmem::proxy::NetEngine> engine_;
};

// A proxy channel on a test engine, fed by host threads (try_push) or by kernels (`gpu`: the
// queue's addresses from queue(), on the current CUDA device).
class TestProxy {
 public:
  // `device`: the CUDA device the proxy thread works on (host producers whose descriptors name
  // GPU memory); kernels as producers (`gpu`) take the current one unless given.
  TestProxy(EngineHandle& engine, uint64_t capacity, uint64_t counters, std::vector<int> cpus,
            bool gpu, std::optional<int> device) {
    channel_ = call_internal([&] {
      int dev = device.value_or(-1);
      if (gpu && !device) gshmem::cuda::check(cudaGetDevice(&dev), "cudaGetDevice");
      const auto producers = gpu ? gshmem::proxy::Producers::kGpu : gshmem::proxy::Producers::kHost;
      return std::make_unique<gshmem::proxy::ProxyChannel>(engine.engine(), capacity, counters,
                                                           producers, dev, cpus);
    });
  }
  // One descriptor (gshmem/proxy_queue.h): its ticket, or None when the queue is full.
  std::optional<uint64_t> try_push_ticket(int op, uint32_t pe, uint16_t region, uintptr_t local,
                                          uint64_t offset, uint64_t bytes, uint16_t signal_region,
                                          uint64_t signal_offset, uint64_t signal_value,
                                          int64_t counter, bool signal_set, int amo, int amo_type,
                                          bool fetch, uint64_t compare) {
    gshmem::proxy::Command c;
    c.op = static_cast<gshmem::proxy::Op>(op);
    c.pe = pe;
    c.region = region;
    c.signal_region = signal_region;
    c.local = local;
    c.offset = offset;
    c.bytes = bytes;
    c.signal_offset = signal_offset;
    c.signal_value = signal_value;
    c.counter = counter < 0 ? 0 : static_cast<uint64_t>(counter) + 1;
    c.signal_set = signal_set;
    c.amo = static_cast<gshmem::proxy::AmoOp>(amo);
    c.amo_type = static_cast<gshmem::proxy::AmoType>(amo_type);
    c.fetch = fetch;
    c.compare = compare;
    return call_internal([&] { return channel_->try_push(c); });
  }
  // The same; false when the queue is full.
  bool try_push(int op, uint32_t pe, uint16_t region, uintptr_t local, uint64_t offset,
                uint64_t bytes, uint16_t signal_region, uint64_t signal_offset,
                uint64_t signal_value, int64_t counter, bool signal_set, int amo, int amo_type,
                bool fetch, uint64_t compare) {
    return try_push_ticket(op, pe, region, local, offset, bytes, signal_region, signal_offset,
                           signal_value, counter, signal_set, amo, amo_type, fetch, compare)
        .has_value();
  }
  // What ticket `ticket` fetched, or None while it is not there.
  std::optional<uint64_t> result(uint64_t ticket) const {
    return call_internal([&] { return channel_->result(ticket); });
  }
  // The region descriptors name as HEAP_REGION (a comm's symmetric heap).
  void set_heap_region(int region) {
    call_internal([&] { channel_->set_heap_region(region); });
  }
  // (slots, tail, head, capacity) for a kernel's QueueView.
  std::tuple<uintptr_t, uintptr_t, uintptr_t, uint64_t> queue() const {
    const gshmem::proxy::QueueView& q = channel_->queue();
    return {reinterpret_cast<uintptr_t>(q.slots), reinterpret_cast<uintptr_t>(q.tail),
            reinterpret_cast<uintptr_t>(q.head), q.capacity};
  }
  uint64_t retired() const { return channel_->retired(); }
  uint64_t counter(uint64_t i) const {
    return call_internal([&] { return channel_->counter(i); });
  }
  void wait_retired(uint64_t n, double timeout) {
    call_internal([&] { channel_->wait_retired(n, timeout); });
  }
  void check() { call_internal([&] { channel_->check(); }); }
  void stop() { call_internal([&] { channel_->stop(); }); }

 private:
  std::unique_ptr<gshmem::proxy::ProxyChannel> channel_;
};

// {name: code} of an enum's values, for the tests to name what they push.
template <class E>
nb::dict codes(std::initializer_list<std::pair<const char*, E>> values) {
  nb::dict d;
  for (const auto& [name, value] : values) d[name] = static_cast<int>(value);
  return d;
}

}  // namespace

void bind_proxy(nb::module_& m) {
  nb::class_<HostQueue>(m, "ProxyQueue")
      .def(nb::init<uint64_t>(), "capacity"_a)
      .def("try_push", &HostQueue::try_push, "words"_a)
      .def("try_pop", &HostQueue::try_pop);
  m.def("proxy_queue_stress", &stress, "producers"_a, "count"_a, "capacity"_a);
  m.def("cpus_near_pci_device", &gshmem::proxy::cpus_near_pci_device, "bus_id"_a,
        "sysfs"_a = "/sys");

  nb::class_<EngineHandle>(m, "NetEngine")
      .def(nb::init<gshmem::python::BootstrapHandle&, std::optional<double>,
                    std::optional<size_t>, std::optional<size_t>, std::optional<size_t>, bool,
                    std::optional<int>>(),
           "bootstrap"_a, "timeout"_a = nb::none(), "bulk_bytes"_a = nb::none(),
           "staging_chunk"_a = nb::none(), "part_bytes"_a = nb::none(), "local_shm"_a = true,
           "gpu_sink_device"_a = nb::none(),
           nb::keep_alive<1, 2>())
      .def("register", &EngineHandle::register_region, "base"_a, "bytes"_a)
      .def("deregister", &EngineHandle::deregister_region, "region"_a)
      .def("region_bytes", &EngineHandle::region_bytes, "region"_a, "pe"_a)
      .def("put", &EngineHandle::put, "pe"_a, "src"_a, "bytes"_a, "region"_a, "offset"_a)
      .def("put_signal", &EngineHandle::put_signal, "pe"_a, "src"_a, "bytes"_a, "region"_a,
           "offset"_a, "signal_region"_a, "signal_offset"_a, "value"_a, "set"_a = false)
      .def("put_value", &EngineHandle::put_value, "pe"_a, "value"_a, "bytes"_a, "region"_a,
           "offset"_a, "signal_region"_a = nb::none(), "signal_offset"_a = 0,
           "signal_value"_a = 0, "set"_a = false)
      .def("put_inline", &EngineHandle::put_inline, "pe"_a, "src"_a, "bytes"_a, "region"_a,
           "offset"_a, "signal_region"_a = nb::none(), "signal_offset"_a = 0,
           "signal_value"_a = 0, "set"_a = false)
      .def("get", &EngineHandle::get, "pe"_a, "dst"_a, "bytes"_a, "region"_a, "offset"_a)
      .def("signal", &EngineHandle::signal, "pe"_a, "region"_a, "offset"_a, "value"_a,
           "set"_a = false, "fenced"_a = false)
      .def("fence", &EngineHandle::fence)
      .def("barrier", &EngineHandle::barrier)
      .def("flush", &EngineHandle::flush)
      .def("flush_start", &EngineHandle::flush_start)
      .def("flushed", &EngineHandle::flushed, "token"_a)
      .def("progress", &EngineHandle::progress)
      .def("close", &EngineHandle::close);

  nb::class_<TestProxy>(m, "TestProxy")
      .def(nb::init<EngineHandle&, uint64_t, uint64_t, std::vector<int>, bool,
                    std::optional<int>>(),
           "engine"_a, "capacity"_a, "counters"_a, "cpus"_a = std::vector<int>{}, "gpu"_a = false,
           "device"_a = nb::none(), nb::keep_alive<1, 2>())
      .def("try_push", &TestProxy::try_push, "op"_a, "pe"_a, "region"_a = 0, "local"_a = 0,
           "offset"_a = 0, "bytes"_a = 0, "signal_region"_a = 0, "signal_offset"_a = 0,
           "signal_value"_a = 0, "counter"_a = -1, "signal_set"_a = false, "amo"_a = 0,
           "amo_type"_a = 1, "fetch"_a = false, "compare"_a = 0)
      .def("try_push_ticket", &TestProxy::try_push_ticket, "op"_a, "pe"_a, "region"_a = 0,
           "local"_a = 0, "offset"_a = 0, "bytes"_a = 0, "signal_region"_a = 0,
           "signal_offset"_a = 0, "signal_value"_a = 0, "counter"_a = -1,
           "signal_set"_a = false, "amo"_a = 0, "amo_type"_a = 1, "fetch"_a = false,
           "compare"_a = 0)
      .def("result", &TestProxy::result, "ticket"_a)
      .def("set_heap_region", &TestProxy::set_heap_region, "region"_a)
      .def("queue", &TestProxy::queue)
      .def("retired", &TestProxy::retired)
      .def("counter", &TestProxy::counter, "index"_a)
      .def("wait_retired", &TestProxy::wait_retired, "count"_a, "timeout"_a)
      .def("check", &TestProxy::check)
      .def("stop", &TestProxy::stop);
  using gshmem::proxy::AmoOp, gshmem::proxy::AmoType, gshmem::proxy::Op;
  m.attr("PROXY_OPS") = codes<Op>({{"put", Op::kPut}, {"put_signal", Op::kPutSignal},
                                   {"signal", Op::kSignal}, {"get", Op::kGet},
                                   {"fence", Op::kFence}, {"quiet", Op::kQuiet},
                                   {"put_value", Op::kPutValue}, {"atomic", Op::kAtomic},
                                   {"get_value", Op::kGetValue},
                                   {"put_value_signal", Op::kPutValueSignal},
                                   {"put_inline", Op::kPutInline},
                                   {"put_inline_signal", Op::kPutInlineSignal}});
  m.attr("PROXY_AMO_OPS") = codes<AmoOp>({{"add", AmoOp::kAdd}, {"and", AmoOp::kAnd},
                                          {"or", AmoOp::kOr}, {"xor", AmoOp::kXor},
                                          {"swap", AmoOp::kSwap},
                                          {"compare_swap", AmoOp::kCompareSwap}});
  m.attr("PROXY_AMO_TYPES") = codes<AmoType>({{"u32", AmoType::kU32}, {"u64", AmoType::kU64},
                                              {"f32", AmoType::kF32}, {"f64", AmoType::kF64}});
  m.attr("HEAP_REGION") = gshmem::proxy::kHeapRegion;
  m.def("transport", [] {
        return call_internal([] {
          switch (gshmem::env::transport()) {
            case gshmem::env::Transport::kP2p: return std::string("p2p");
            case gshmem::env::Transport::kProxy: return std::string("proxy");
            default: return std::string("auto");
          }
        });
      }, "GSHMEM_TRANSPORT as a comm created now would read it (docs/network.md).");
  m.def("proxy_queue_capacity", [] {
        return call_internal([] { return gshmem::env::proxy_queue(); });
      }, "GSHMEM_PROXY_QUEUE as a comm created now would read it (default 1024).");
  m.def("proxy_staging", [] {
        return call_internal([] { return gshmem::env::proxy_staging(); });
      }, "GSHMEM_PROXY_STAGING as a comm created now would read it (default off).");
  m.def("proxy_bulk_sizes", [] {
        return call_internal([] {
          return std::make_tuple(gshmem::env::proxy_bulk_min(gshmem::proxy::kDefaultBulkBytes),
                                gshmem::env::proxy_part(gshmem::proxy::kDefaultPartBytes));
        });
      }, "(GSHMEM_PROXY_BULK_MIN, GSHMEM_PROXY_PART) as a comm created now would read them.");
  m.def("ucx_unavailable", [] { return gshmem::proxy::ucx_unavailable(); },
        "Empty when the proxy path's UCX loads in this process; else why not.");
}
