// gshmem._C: the Python extension. It binds the C ABI (so Python exercises exactly what C/C++
// users get) plus two internal classes used by tests (the bootstrap and the local channel).
// Blocking calls release the GIL so that one process can drive one comm per GPU from threads.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "bootstrap/local_channel.h"
#include "bootstrap/tcp_bootstrap.h"
#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "gshmem/gshmem.h"
#include "heap/allocator.h"
#include "python/ext_bootstrap.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;
using gshmem::python::call;
using gshmem::python::call_internal;
using gshmem::python::BootstrapHandle;
using gshmem::python::raise;
using gshmem::python::uid_from_bytes;

namespace {

class CommHandle {
 public:
  CommHandle(const nb::bytes& uid, int rank, int nranks, int device) {
    gshmem_unique_id_t id = uid_from_bytes(uid);
    call([&] { return gshmem_comm_init(&comm_, &id, rank, nranks, device); });
  }
  ~CommHandle() {
    if (comm_) gshmem_comm_abort(comm_);
  }
  void finalize() {
    gshmem_comm_t c = take();
    call([&] { return gshmem_comm_finalize(c); });
  }
  void abort() {
    if (!comm_) return;
    gshmem_comm_t c = take();
    call([&] { return gshmem_comm_abort(c); });
  }
  bool alive() const { return comm_ != nullptr; }
  nb::dict info() {
    gshmem_comm_info_t i{};
    call([&] { return gshmem_comm_info(get(), &i); });
    nb::dict d;
    d["rank"] = i.rank;
    d["nranks"] = i.nranks;
    d["local_rank"] = i.local_rank;
    d["local_size"] = i.local_size;
    d["device"] = i.device;
    d["heap_reserved"] = i.heap_reserved;
    d["heap_mapped"] = i.heap_mapped;
    d["heap_in_use"] = i.heap_in_use;
    d["heap_base"] = reinterpret_cast<uintptr_t>(i.heap_base);
    return d;
  }
  void barrier() {
    call([&] { return gshmem_barrier_host(get()); });
  }
  void check() {
    gshmem_comm_t c = get();
    const gshmem_result_t rc = gshmem_comm_check(c);  // not blocking: keeps the GIL
    if (rc != GSHMEM_SUCCESS) raise(rc, gshmem_last_error());
  }
  uintptr_t malloc(size_t size, size_t alignment, bool zero) {
    void* p = nullptr;
    call([&] {
      return zero ? gshmem_calloc(get(), size, alignment, &p)
                  : gshmem_malloc(get(), size, alignment, &p);
    });
    return reinterpret_cast<uintptr_t>(p);
  }
  void free(uintptr_t ptr) {
    call([&] { return gshmem_free(get(), reinterpret_cast<void*>(ptr)); });
  }
  gshmem_comm_t raw() const { return get(); }
  std::optional<uintptr_t> ptr(uintptr_t p, int pe) {
    void* q = nullptr;
    call([&] { return gshmem_ptr(get(), reinterpret_cast<void*>(p), pe, &q); });
    if (!q) return std::nullopt;
    return reinterpret_cast<uintptr_t>(q);
  }

 private:
  gshmem_comm_t get() const {
    if (!comm_) raise(GSHMEM_ERROR_USAGE, "this comm has been finalized");
    return comm_;
  }
  gshmem_comm_t take() {
    gshmem_comm_t c = get();
    comm_ = nullptr;
    return c;
  }
  gshmem_comm_t comm_ = nullptr;
};

// A flat uint8 view of device memory for DLPack consumers (torch, CuPy, JAX). `owner` is kept
// alive as long as any consumer holds the view.
nb::ndarray<> device_bytes(uintptr_t ptr, size_t nbytes, int device, nb::handle owner) {
  size_t shape[1] = {nbytes};
  return nb::ndarray<>(reinterpret_cast<void*>(ptr), 1, shape, owner, nullptr, nb::dtype<uint8_t>(),
                       nb::device::cuda::value, device);
}

}  // namespace

// The Python exception class for a result code (classes live in gshmem/_errors.py).
void gshmem::python::raise(gshmem_result_t code, const std::string& message) {
  const char* name = "Error";
  switch (code) {
    case GSHMEM_ERROR_USAGE: name = "UsageError"; break;
    case GSHMEM_ERROR_BOOTSTRAP: name = "BootstrapError"; break;
    case GSHMEM_ERROR_TIMEOUT: name = "TimeoutError"; break;
    case GSHMEM_ERROR_HEAP: name = "HeapError"; break;
    case GSHMEM_ERROR_CUDA: name = "CudaError"; break;
    case GSHMEM_ERROR_FAULT: name = "FaultError"; break;
    default: break;
  }
  nb::object cls = nb::module_::import_("gshmem._errors").attr(name);
  PyErr_SetString(cls.ptr(), message.c_str());
  throw nb::python_error();
}

gshmem_comm_t gshmem::python::comm_of(nb::handle comm_handle) {
  return nb::cast<CommHandle&>(comm_handle).raw();
}

void bind_device(nb::module_& m);  // ext_device.cpp
void bind_stream(nb::module_& m);  // ext_stream.cpp
void bind_coll(nb::module_& m);  // ext_coll.cpp
void bind_coll_select(nb::module_& m);  // ext_coll_select.cpp
void bind_proxy(nb::module_& m);  // ext_proxy.cpp
void bind_proxy_trace(nb::module_& m);  // ext_proxy_trace.cpp

NB_MODULE(_C, m) {
  m.doc() = "gshmem native core (use the gshmem package, not this module directly)";
  m.attr("UNIQUE_ID_BYTES") = GSHMEM_UNIQUE_ID_BYTES;
  m.attr("VERSION") =
      nb::make_tuple(GSHMEM_VERSION_MAJOR, GSHMEM_VERSION_MINOR, GSHMEM_VERSION_PATCH);

  m.def("unique_id_create", [](std::optional<std::string> address, int port, bool listen) {
        gshmem_unique_id_t id{};
        std::string addr = address.value_or("");
        call([&] { return gshmem_unique_id_create(&id, addr.c_str(), port, listen); });
        return nb::bytes(id.bytes, sizeof id.bytes);
      }, "address"_a = nb::none(), "port"_a = 0, "listen"_a = true);
  m.def("unique_id_describe", [](const nb::bytes& uid) {
        gshmem_unique_id_t id = uid_from_bytes(uid);
        char buf[64];
        call([&] { return gshmem_unique_id_describe(&id, buf, sizeof buf); });
        return std::string(buf);
      });
  m.def("device_count", [] { return gshmem::cuda::device_count(); },
        "Number of CUDA devices visible to this process (0 without a driver or GPU).");
  m.def("timeout_seconds",
        [] { return call_internal([] { return gshmem::env::timeout_seconds(); }); });
  m.def("parse_size", [](const std::string& text) {
        return call_internal([&] { return gshmem::env::parse_size(text, "size"); });
      });
  m.def("device_bytes", &device_bytes, "ptr"_a, "nbytes"_a, "device"_a, "owner"_a);

  nb::class_<CommHandle>(m, "CommHandle")
      .def(nb::init<const nb::bytes&, int, int, int>(), "uid"_a, "rank"_a, "nranks"_a, "device"_a)
      .def("finalize", &CommHandle::finalize)
      .def("abort", &CommHandle::abort)
      .def_prop_ro("alive", &CommHandle::alive)
      .def("info", &CommHandle::info)
      .def("barrier", &CommHandle::barrier)
      .def("check", &CommHandle::check)
      .def("malloc", &CommHandle::malloc, "size"_a, "alignment"_a, "zero"_a)
      .def("free", &CommHandle::free, "ptr"_a)
      .def("ptr", &CommHandle::ptr, "ptr"_a, "pe"_a)
      // the gshmem_comm_t, for adapters that call the C API themselves (gshmem.jax's handlers)
      .def_prop_ro("address",
                   [](const CommHandle& h) { return reinterpret_cast<uintptr_t>(h.raw()); });

  // The heap's allocator on its own (no GPU), for unit and property tests.
  nb::class_<gshmem::Allocator>(m, "Allocator")
      .def(nb::init<>())
      .def("allocate", [](gshmem::Allocator& a, uint64_t size, uint64_t alignment) {
            return call_internal([&] { return a.allocate(size, alignment); });
          }, "size"_a, "alignment"_a)
      .def("release", [](gshmem::Allocator& a, uint64_t offset) {
            return call_internal([&] { return a.release(offset); });
          }, "offset"_a)
      .def("end_needed", [](const gshmem::Allocator& a, uint64_t size, uint64_t alignment) {
            return call_internal([&] { return a.end_needed(size, alignment); });
          }, "size"_a, "alignment"_a)
      .def("grow", [](gshmem::Allocator& a, uint64_t end) { call_internal([&] { a.grow(end); }); })
      .def_prop_ro("end", &gshmem::Allocator::end)
      .def_prop_ro("in_use", &gshmem::Allocator::in_use)
      .def_prop_ro("live_blocks", &gshmem::Allocator::live_blocks)
      .def_prop_ro("free_blocks", &gshmem::Allocator::free_blocks);

  nb::class_<BootstrapHandle>(m, "BootstrapHandle")
      .def(nb::init<const nb::bytes&, int, int, double>(), "uid"_a, "rank"_a, "nranks"_a,
           "timeout"_a)
      .def("allgather", &BootstrapHandle::allgather)
      .def("broadcast", &BootstrapHandle::broadcast, "data"_a, "root"_a)
      .def("barrier", &BootstrapHandle::barrier)
      .def("connect_local", &BootstrapHandle::connect_local)
      .def("exchange_fd", &BootstrapHandle::exchange_fd, "fd"_a, "tag"_a)
      .def("closed_peer", &BootstrapHandle::closed_peer)
      .def("announce_failure", &BootstrapHandle::announce_failure, "message"_a)
      .def("close", &BootstrapHandle::close);
  bind_device(m);
  bind_stream(m);
  bind_coll(m);
  bind_coll_select(m);
  bind_proxy(m);
  bind_proxy_trace(m);
}
