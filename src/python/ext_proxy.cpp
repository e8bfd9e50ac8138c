// gshmem._C, proxy part: the descriptor queue (src/proxy/descriptor_queue.h) with host memory and
// host threads as producers, for the CPU tests: a queue object to drive step by step, and a
// stress run of many producer threads against one consumer that checks every descriptor.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proxy/descriptor_queue.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;
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
    std::vector<uint64_t> expect(producers, 0);
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
  d["full_waits"] = full.load();
  d["wraps"] = popped / capacity;
  return d;
}

}  // namespace

void bind_proxy(nb::module_& m) {
  nb::class_<HostQueue>(m, "ProxyQueue")
      .def(nb::init<uint64_t>(), "capacity"_a)
      .def("try_push", &HostQueue::try_push, "words"_a)
      .def("try_pop", &HostQueue::try_pop);
  m.def("proxy_queue_stress", &stress, "producers"_a, "count"_a, "capacity"_a);
}
