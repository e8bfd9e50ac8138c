// gshmem._C, device part: binds the device-state and team section of the C ABI (errors and the
// comm behind a CommHandle come from ext_common.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <cstring>
#include <string>
#include <tuple>

#include "common/process.h"
#include "core/fault.h"
#include "core/watchdog.h"
#include "gshmem/gshmem.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;
using gshmem::python::call;
using gshmem::python::comm_of;

namespace {

using TeamTuple = std::tuple<int, int, int, int>;  // (start, stride, size, my_pe)

TeamTuple to_tuple(const gshmem_team_t& t) { return {t.start, t.stride, t.size, t.my_pe}; }

gshmem_team_t from_tuple(const TeamTuple& t) {
  return gshmem_team_t{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t)};
}

// A Watchdog whose stop callback records the reason for wait().
class WatchdogProbe {
 public:
  WatchdogProbe(int pe, int pid, uint64_t start_time, int period_ms)
      : dog_({{pe, pid, start_time}}, [this] { return device_failed_.load(); },
             [this] {
               std::lock_guard<std::mutex> lock(mutex_);
               return lost_;
             },
             [this](const std::string& reason) { stopped(reason); },
             [this] { releases_.fetch_add(1); }, std::chrono::milliseconds(period_ms)) {}
  void fail_device() { device_failed_.store(true); }
  // What the next poll of the connections reports (a closed connection's message).
  void lose_connection(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    lost_ = reason;
  }
  // How often the watchdog released the on-stream waits again since it stopped.
  int releases() const { return releases_.load(); }
  std::optional<std::string> wait(double timeout) {
    nb::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_.wait_for(lock, std::chrono::duration<double>(timeout), [this] { return fired_; })) {
      return std::nullopt;
    }
    return reason_;
  }

 private:
  void stopped(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    reason_ = reason;
    fired_ = true;
    done_.notify_all();
  }
  std::atomic<bool> device_failed_{false};
  std::atomic<int> releases_{0};
  std::mutex mutex_;
  std::condition_variable done_;
  bool fired_ = false;
  std::string reason_;
  std::string lost_;
  gshmem::Watchdog dog_;  // last: its thread starts once the members above exist
};

}  // namespace

void bind_device(nb::module_& m) {
  m.attr("DEVICE_STATE_VERSION") = GSHMEM_DEVICE_STATE_VERSION;
  m.attr("DEVICE_STATE_SIZE") = sizeof(gshmem_device_t);
  m.attr("TEAM_SIZE") = sizeof(gshmem_team_t);

  // Byte offsets of gshmem_device_t's fields, for the Python mirror's self-check.
  nb::dict offsets;
  offsets["version"] = offsetof(gshmem_device_t, version);
  offsets["my_pe"] = offsetof(gshmem_device_t, my_pe);
  offsets["n_pes"] = offsetof(gshmem_device_t, n_pes);
  offsets["my_slot"] = offsetof(gshmem_device_t, my_slot);
  offsets["heap_base"] = offsetof(gshmem_device_t, heap_base);
  offsets["slot_base"] = offsetof(gshmem_device_t, slot_base);
  offsets["slot_size"] = offsetof(gshmem_device_t, slot_size);
  offsets["local_index"] = offsetof(gshmem_device_t, local_index);
  offsets["sync"] = offsetof(gshmem_device_t, sync);
  offsets["world"] = offsetof(gshmem_device_t, world);
  offsets["node"] = offsetof(gshmem_device_t, node);
  offsets["timeout_ns"] = offsetof(gshmem_device_t, timeout_ns);
  offsets["fault"] = offsetof(gshmem_device_t, fault);
  offsets["fault_claim"] = offsetof(gshmem_device_t, fault_claim);
  offsets["proxy_slots"] = offsetof(gshmem_device_t, proxy_slots);
  offsets["proxy_tail"] = offsetof(gshmem_device_t, proxy_tail);
  offsets["proxy_head"] = offsetof(gshmem_device_t, proxy_head);
  offsets["proxy_capacity"] = offsetof(gshmem_device_t, proxy_capacity);
  offsets["proxy_retired"] = offsetof(gshmem_device_t, proxy_retired);
  offsets["proxy_failed"] = offsetof(gshmem_device_t, proxy_failed);
  offsets["proxy_results"] = offsetof(gshmem_device_t, proxy_results);
  offsets["proxy_inline"] = offsetof(gshmem_device_t, proxy_inline);
  m.attr("DEVICE_STATE_OFFSETS") = offsets;

  // The fault record (gshmem_fault_t), for the Python mirror and the CPU tests of its message.
  m.attr("FAULT_SIZE") = sizeof(gshmem_fault_t);
  nb::dict fault;
  fault["abort"] = offsetof(gshmem_fault_t, abort);
  fault["recorded"] = offsetof(gshmem_fault_t, recorded);
  fault["op"] = offsetof(gshmem_fault_t, op);
  fault["cause"] = offsetof(gshmem_fault_t, cause);
  fault["pe"] = offsetof(gshmem_fault_t, pe);
  fault["cmp"] = offsetof(gshmem_fault_t, cmp);
  fault["block"] = offsetof(gshmem_fault_t, block);
  fault["thread"] = offsetof(gshmem_fault_t, thread);
  fault["addr"] = offsetof(gshmem_fault_t, addr);
  fault["expected"] = offsetof(gshmem_fault_t, expected);
  fault["seen"] = offsetof(gshmem_fault_t, seen);
  fault["waited_ns"] = offsetof(gshmem_fault_t, waited_ns);
  m.attr("FAULT_OFFSETS") = fault;
  m.def("describe_fault", [](const nb::bytes& raw, int my_pe) {
        if (raw.size() != sizeof(gshmem_fault_t)) {
          gshmem::python::raise(GSHMEM_ERROR_USAGE, "a gshmem_fault_t is " +
                                                        std::to_string(sizeof(gshmem_fault_t)) +
                                                        " bytes");
        }
        gshmem_fault_t f;
        std::memcpy(&f, raw.c_str(), sizeof f);
        return gshmem::describe_fault(f, my_pe);
      }, "record"_a, "my_pe"_a, "The message FaultError carries for a device fault record.");
  // The comm's watchdog on its own (no GPU): one peer process to watch and a device-failure flag
  // the test sets, for the CPU tests of what it notices and when.
  nb::class_<WatchdogProbe>(m, "WatchdogProbe")
      .def(nb::init<int, int, uint64_t, int>(), "pe"_a, "pid"_a, "start_time"_a, "period_ms"_a)
      .def("fail_device", &WatchdogProbe::fail_device)
      .def("lose_connection", &WatchdogProbe::lose_connection, "reason"_a)
      .def("wait", &WatchdogProbe::wait, "timeout"_a,
           "The reason the watchdog stopped (\"\" for a device failure), or None by the timeout.")
      .def("releases", &WatchdogProbe::releases);
  m.def("process_start_time", &gshmem::process_start_time, "pid"_a);
  m.def("process_alive", &gshmem::process_alive, "pid"_a, "start_time"_a,
        "The watchdog's liveness test of a peer process.");

  m.attr("WINDOW_STATE_VERSION") = GSHMEM_WINDOW_STATE_VERSION;
  m.attr("WINDOW_STATE_SIZE") = sizeof(gshmem_window_t);
  m.def("window_register", [](nb::handle comm, uintptr_t ptr, uint64_t bytes, int contexts,
                              int signals, int counters) {
        gshmem_window_handle_t win{};
        call([&] {
          return gshmem_window_register(comm_of(comm), reinterpret_cast<void*>(ptr), bytes,
                                        contexts, signals, counters, &win);
        });
        gshmem_window_t state{};
        call([&] { return gshmem_window_device(win, &state); });
        return std::make_pair(reinterpret_cast<uintptr_t>(win),
                              nb::bytes(reinterpret_cast<const char*>(&state), sizeof state));
      }, "comm"_a, "ptr"_a, "bytes"_a, "contexts"_a, "signals"_a, "counters"_a,
      "Collective: (window handle, its gshmem_window_t as bytes).");
  m.def("window_deregister", [](nb::handle comm, uintptr_t win) {
        call([&] {
          return gshmem_window_deregister(comm_of(comm),
                                          reinterpret_cast<gshmem_window_handle_t>(win));
        });
      }, "comm"_a, "win"_a, "Collective.");
  m.def("comm_device", [](nb::handle comm) {
        gshmem_device_t dev{};
        call([&] { return gshmem_comm_device(comm_of(comm), &dev); });
        return nb::bytes(reinterpret_cast<const char*>(&dev), sizeof dev);
      }, "comm"_a, "The gshmem_device_t of a CommHandle, as bytes.");
  m.def("team_world", [](nb::handle comm) {
        gshmem_team_t t{};
        call([&] { return gshmem_team_world(comm_of(comm), &t); });
        return to_tuple(t);
      }, "comm"_a);
  m.def("team_node", [](nb::handle comm) {
        gshmem_team_t t{};
        call([&] { return gshmem_team_node(comm_of(comm), &t); });
        return to_tuple(t);
      }, "comm"_a);
  m.def("team_split_strided", [](const TeamTuple& parent, int start, int stride, int size) {
        gshmem_team_t p = from_tuple(parent), child{};
        call([&] { return gshmem_team_split_strided(&p, start, stride, size, &child); });
        return to_tuple(child);
      }, "parent"_a, "start"_a, "stride"_a, "size"_a);
  m.def("team_split_2d", [](const TeamTuple& parent, int xrange) {
        gshmem_team_t p = from_tuple(parent), x{}, y{};
        call([&] { return gshmem_team_split_2d(&p, xrange, &x, &y); });
        return std::make_pair(to_tuple(x), to_tuple(y));
      }, "parent"_a, "xrange"_a);
  m.def("team_translate_pe", [](const TeamTuple& src, int pe, const TeamTuple& dst) {
        gshmem_team_t s = from_tuple(src), d = from_tuple(dst);
        int out = -1;
        call([&] { return gshmem_team_translate_pe(&s, pe, &d, &out); });
        return out;
      }, "src"_a, "pe"_a, "dst"_a);
}
