// gshmem._C, on-stream part: binds the on-stream section of the C ABI (gshmem_*_on_stream) for
// python/gshmem/comm.py, which converts tensors, Buffers and streams to the raw addresses and
// handles these functions take. ext.cpp lends the gshmem_comm_t behind a CommHandle and its
// function that raises the gshmem error class for a result code.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "gshmem/gshmem.h"
#include "stream/stream_state.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using RaiseFn = void (*)(gshmem_result_t, const std::string&);

// Enqueueing does not wait for the GPU, but a call can block while the stream's queue is full
// (a stream held by a wait): the GIL is released so that other threads, which may drive the
// comms whose signals end that wait, keep running.
template <typename F>
void call(RaiseFn raise, F&& f) {
  gshmem_result_t rc;
  std::string message;
  {
    nb::gil_scoped_release release;
    rc = f();
    if (rc != GSHMEM_SUCCESS) message = gshmem_last_error();
  }
  if (rc != GSHMEM_SUCCESS) raise(rc, message);
}

template <typename T = void>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

}  // namespace

void bind_stream(nb::module_& m, gshmem_comm_t (*comm_of)(nb::handle), RaiseFn raise) {
  m.attr("SIGNAL_SET") = GSHMEM_SIGNAL_SET;
  m.attr("SIGNAL_ADD") = GSHMEM_SIGNAL_ADD;
  nb::dict cmps;
  cmps["eq"] = GSHMEM_CMP_EQ;
  cmps["ne"] = GSHMEM_CMP_NE;
  cmps["gt"] = GSHMEM_CMP_GT;
  cmps["ge"] = GSHMEM_CMP_GE;
  cmps["lt"] = GSHMEM_CMP_LT;
  cmps["le"] = GSHMEM_CMP_LE;
  m.attr("CMPS") = cmps;

  m.def("stream_kernel_max_bytes", [=] {
        try {
          return gshmem::stream::kernel_max_bytes_from_env();
        } catch (const gshmem::Error& e) {
          raise(e.code(), e.what());
        }
      }, "GSHMEM_STREAM_KERNEL_MAX_BYTES as a comm created now would read it (default 0).");
  m.def("put_on_stream", [=](nb::handle comm, uintptr_t dst, uintptr_t src, size_t bytes, int pe,
                             uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] {
          return gshmem_put_on_stream(c, ptr(dst), ptr(src), bytes, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "src"_a, "bytes"_a, "pe"_a, "stream"_a);
  m.def("get_on_stream", [=](nb::handle comm, uintptr_t dst, uintptr_t src, size_t bytes, int pe,
                             uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] {
          return gshmem_get_on_stream(c, ptr(dst), ptr(src), bytes, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "src"_a, "bytes"_a, "pe"_a, "stream"_a);
  m.def("put_signal_on_stream", [=](nb::handle comm, uintptr_t dst, uintptr_t src, size_t bytes,
                                    uintptr_t sig, uint64_t value, int op, int pe,
                                    uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] {
          return gshmem_put_signal_on_stream(c, ptr(dst), ptr(src), bytes, ptr<uint64_t>(sig),
                                             value, op, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "src"_a, "bytes"_a, "sig"_a, "value"_a, "op"_a, "pe"_a, "stream"_a);
  m.def("signal_op_on_stream", [=](nb::handle comm, uintptr_t sig, uint64_t value, int op, int pe,
                                   uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] {
          return gshmem_signal_op_on_stream(c, ptr<uint64_t>(sig), value, op, pe, ptr(stream));
        });
      }, "comm"_a, "sig"_a, "value"_a, "op"_a, "pe"_a, "stream"_a);
  m.def("signal_wait_until_on_stream", [=](nb::handle comm, uintptr_t sig, int cmp, uint64_t value,
                                           uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] {
          return gshmem_signal_wait_until_on_stream(c, ptr<uint64_t>(sig), cmp, value, ptr(stream));
        });
      }, "comm"_a, "sig"_a, "cmp"_a, "value"_a, "stream"_a);
  m.def("quiet_on_stream", [=](nb::handle comm, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] { return gshmem_quiet_on_stream(c, ptr(stream)); });
      }, "comm"_a, "stream"_a);
  m.def("barrier_on_stream", [=](nb::handle comm, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call(raise, [&] { return gshmem_barrier_on_stream(c, ptr(stream)); });
      }, "comm"_a, "stream"_a);
}
