#include "proxy/proxy.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <deque>
#include <utility>
#include <fstream>
#include <sstream>

#include "common/cuda_api.h"
#include "common/error.h"

namespace gshmem::proxy {
namespace {

constexpr int kBatch = 64;           // descriptors taken before the engine is progressed again
// Idle (nothing queued, nothing in flight), the thread keeps polling for this long, yielding
// its core between polls to any other thread that wants it, and only then sleeps between polls:
// a descriptor that finds it asleep waits up to a sleep (~50 us plus the timer's slack), which
// traffic a few hundred microseconds apart (a kernel's messages between computations) would
// pay every time.
constexpr auto kIdleBeforeSleep = std::chrono::milliseconds(10);
constexpr auto kIdleSleep = std::chrono::microseconds(50);

}  // namespace

Proxy::Proxy(NetEngine& engine, QueueView queue, CompletionWords completion,
             std::vector<int> cpus, int device)
    : engine_(engine), queue_(queue), completion_(completion) {
  GSHMEM_REQUIRE(valid_capacity(queue.capacity), "a proxy queue's capacity must be a power of two");
  // Only head: the consumer never touches tail, which may be GPU memory (kernels as producers).
  GSHMEM_REQUIRE(*queue.head == 0, "a proxy starts on an empty queue");
  __atomic_store_n(completion_.retired, 0, __ATOMIC_RELEASE);
  __atomic_store_n(completion_.failed, 0, __ATOMIC_RELEASE);
  thread_ = std::thread([this, device] { run(device); });
  if (!cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) {
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    }
    // Best effort: a cpuset that excludes those cores (a container) leaves the thread unpinned.
    pthread_setaffinity_np(thread_.native_handle(), sizeof set, &set);
  }
}

std::vector<int> cpus_near_pci_device(const std::string& bus_id, const std::string& sysfs) {
  std::string id = bus_id;
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::ifstream in(sysfs + "/bus/pci/devices/" + id + "/local_cpulist");
  std::string list;
  if (!in || !std::getline(in, list)) return {};
  std::vector<int> cpus;
  std::stringstream ranges(list);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    const size_t dash = range.find('-');
    try {
      const int first = std::stoi(range.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
      for (int c = first; c <= last; ++c) cpus.push_back(c);
    } catch (const std::exception&) {
      return {};  // not a cpulist: no opinion rather than a wrong one
    }
  }
  return cpus;
}

Proxy::~Proxy() { stop(); }

void Proxy::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

bool Proxy::failed(gshmem_result_t* code, std::string* message) const {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_code_ == GSHMEM_SUCCESS) return false;
  if (code != nullptr) *code = error_code_;
  if (message != nullptr) *message = error_;
  return true;
}

void Proxy::counted(void* self, uint64_t counter) {
  const CompletionWords& c = static_cast<Proxy*>(self)->completion_;
  uint64_t* word = &c.counters[counter - 1];
  if (c.counter_sink != nullptr) {
    c.counter_sink(c.counter_arg, word, 1, SignalUpdate::kAdd);
  } else {
    __atomic_fetch_add(word, 1, __ATOMIC_RELEASE);
  }
}

ResultSlot& Proxy::result_slot(uint64_t ticket) const {
  return completion_.results[ticket & (queue_.capacity - 1)];
}

void Proxy::fetched(void* self, uint64_t ticket, uint64_t value) {
  ResultSlot& slot = static_cast<Proxy*>(self)->result_slot(ticket);
  __atomic_store_n(&slot.value, value, __ATOMIC_RELAXED);
  __atomic_store_n(&slot.ticket, ticket + 1, __ATOMIC_RELEASE);
}

void Proxy::got(void* self, uint64_t ticket) {
  ResultSlot& slot = static_cast<Proxy*>(self)->result_slot(ticket);
  __atomic_store_n(&slot.ticket, ticket + 1, __ATOMIC_RELEASE);  // the value landed before
}

int Proxy::resolve(uint16_t region) const {
  if (region != kHeapRegion) return region;
  const int heap = heap_region_.load(std::memory_order_acquire);
  GSHMEM_REQUIRE(heap >= 0, "a proxy descriptor names the heap, which is not registered");
  return heap;
}

void Proxy::execute(const Command& c, uint64_t ticket) {
  GSHMEM_REQUIRE(c.counter <= completion_.n_counters,
                 "proxy descriptor names counter " + std::to_string(c.counter - 1) + " of " +
                     std::to_string(completion_.n_counters));
  const Done done = c.counter != 0 ? &Proxy::counted : nullptr;
  const int pe = static_cast<int>(c.pe);
  const SignalUpdate update = c.signal_set ? SignalUpdate::kSet : SignalUpdate::kAdd;
  // The signal a put applies after its data (kPut*Signal); none otherwise.
  const bool signalled = c.op == Op::kPutSignal || c.op == Op::kPutValueSignal ||
                         c.op == Op::kPutInlineSignal;
  const SignalAfter signal =
      signalled ? SignalAfter{resolve(c.signal_region), c.signal_offset, c.signal_value, update}
                : SignalAfter{};
  const SignalAfter* after = signalled ? &signal : nullptr;
  switch (c.op) {
    case Op::kPut:
    case Op::kPutSignal:
      engine_.put(pe, reinterpret_cast<const void*>(c.local), c.bytes, resolve(c.region),
                  c.offset, done, this, c.counter, after);
      return;
    case Op::kPutValue:
    case Op::kPutValueSignal:
      engine_.put_value(pe, resolve(c.region), c.offset, c.local, c.bytes, done, this,
                        c.counter, after);
      return;
    case Op::kPutInline:
    case Op::kPutInlineSignal:
      GSHMEM_REQUIRE(c.bytes <= kInlineBytes, "an inline proxy put carries at most " +
                                                  std::to_string(kInlineBytes) + " bytes, not " +
                                                  std::to_string(c.bytes));
      engine_.put_inline(pe, resolve(c.region), c.offset, inline_slot(queue_, ticket), c.bytes,
                         done, this, c.counter, after);
      return;
    case Op::kSignal:  // a signal releases what was written before it (signal.cuh)
      engine_.fenced_signal(pe, resolve(c.signal_region), c.signal_offset, c.signal_value,
                            update);
      return;
    case Op::kGet:
      engine_.get(pe, reinterpret_cast<void*>(c.local), c.bytes, resolve(c.region), c.offset,
                  done, this, c.counter);
      return;
    case Op::kFence:
      engine_.fence();
      return;
    case Op::kQuiet:  // run() holds quiets back and starts one flush per batch
      return;
    case Op::kAtomic: {  // the engine refuses an unknown or misaligned atomic
      const Atomic a{c.amo, c.amo_type, c.local, c.compare};
      engine_.atomic(pe, resolve(c.region), c.offset, a, c.fetch ? &Proxy::fetched : nullptr,
                     this, ticket);
      return;
    }
    case Op::kGetValue: {
      GSHMEM_REQUIRE(c.bytes == 1 || c.bytes == 2 || c.bytes == 4 || c.bytes == 8,
                     "a proxy value get reads 1, 2, 4 or 8 bytes, not " + std::to_string(c.bytes));
      ResultSlot& slot = result_slot(ticket);
      slot.value = 0;  // a narrower value leaves the high bytes zero
      engine_.get(pe, &slot.value, c.bytes, resolve(c.region), c.offset, &Proxy::got, this,
                  ticket);
      return;
    }
  }
  throw_error(GSHMEM_ERROR_USAGE,
              "proxy descriptor has unknown op " + std::to_string(static_cast<int>(c.op)));
}

void Proxy::run(int device) {
  uint64_t next = __atomic_load_n(queue_.head, __ATOMIC_ACQUIRE);
  auto active = std::chrono::steady_clock::now();  // when the thread last had work
  // Quiets retire when a flush started after them finishes: (flush token, tickets it covers),
  // oldest first. Later descriptors are issued meanwhile, so blocking puts from many GPU
  // threads (a put and a quiet each) overlap their flushes instead of taking turns.
  std::deque<std::pair<uint64_t, uint64_t>> flushing;
  try {
    if (device >= 0) cuda::check(cudaSetDevice(device), "cudaSetDevice (proxy thread)");
    while (!stop_.load(std::memory_order_acquire)) {
      int taken = 0;
      bool quiet_held = false;  // a kQuiet taken in this batch waits for the batch's flush
      uint64_t words[kPayloadWords];
      while (taken < kBatch && try_peek(queue_, next, words)) {
        const Command c = decode(words);
        // Quiets coalesce: one flush started after the batch completes everything before
        // each of them. Issuing what follows a quiet before that flush finished is sound: a
        // producer pushes nothing that must follow its quiet before the quiet retired
        // (proxy_quiet waits for it), and retired stays at the first quiet not yet flushed.
        if (c.op == Op::kQuiet) {
          quiet_held = true;
        } else {
          execute(c, next);  // the engine copies what it keeps of the slot (inline data)
        }
        release(queue_, next);
        if (!quiet_held && flushing.empty()) {
          __atomic_store_n(completion_.retired, next, __ATOMIC_RELEASE);
        }
        ++taken;
      }
      if (quiet_held) flushing.emplace_back(engine_.flush_start(), next);
      const bool moved = engine_.progress();
      bool retired = false;
      while (!flushing.empty() && engine_.flushed(flushing.front().first)) {
        const uint64_t covered = flushing.front().second;
        flushing.pop_front();
        // Past every descriptor taken when no quiet waits any more; else up to the next one.
        __atomic_store_n(completion_.retired, flushing.empty() ? next : covered,
                         __ATOMIC_RELEASE);
        retired = true;
      }
      if (taken > 0 || moved || retired) {
        active = std::chrono::steady_clock::now();
        continue;
      }
      // Nothing happened this round. Never asleep while data moves (over TCP it moves only
      // while the worker progresses), but yield the core: the peer this thread waits for may
      // need it (a machine with fewer cores than busy threads stalled a time slice otherwise).
      const auto now = std::chrono::steady_clock::now();
      if (!flushing.empty() || engine_.busy()) active = now;
      if (now - active < kIdleBeforeSleep) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kIdleSleep);
      }
    }
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(error_mu_);
    error_code_ = e.code();
    error_ = "proxy thread stopped: " + std::string(e.what());
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(error_mu_);
    error_code_ = GSHMEM_ERROR_SYSTEM;
    error_ = "proxy thread stopped: " + std::string(e.what());
  }
  if (error_code_ != GSHMEM_SUCCESS) __atomic_store_n(completion_.failed, 1, __ATOMIC_RELEASE);
}

}  // namespace gshmem::proxy
