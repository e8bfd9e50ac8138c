// gshmem._C, on-stream part: binds the on-stream section of the C ABI (gshmem_*_on_stream) for
// python/gshmem/comm.py, which converts tensors, Buffers and streams to the raw addresses and
// handles these functions take (errors and the comm behind a CommHandle: ext_common.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "gshmem/gshmem.h"
#include "python/ext_common.h"
#include "stream/stream_state.h"

namespace nb = nanobind;
using namespace nb::literals;
using gshmem::python::call;
using gshmem::python::comm_of;
using gshmem::python::call_internal;

namespace {

template <typename T = void>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

}  // namespace

void bind_stream(nb::module_& m) {
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

  m.def("stream_kernel_max_bytes", [] {
        return call_internal([] { return gshmem::stream::kernel_max_bytes_from_env(); });
      }, "GSHMEM_STREAM_KERNEL_MAX_BYTES as a comm created now would read it (default 16 KiB).");
  m.def("put_on_stream", [](nb::handle comm, uintptr_t dst, uintptr_t src, size_t bytes, int pe,
                             uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_put_on_stream(c, ptr(dst), ptr(src), bytes, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "src"_a, "bytes"_a, "pe"_a, "stream"_a);
  m.def("get_on_stream", [](nb::handle comm, uintptr_t dst, uintptr_t src, size_t bytes, int pe,
                             uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_get_on_stream(c, ptr(dst), ptr(src), bytes, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "src"_a, "bytes"_a, "pe"_a, "stream"_a);
  m.def("put_2d_on_stream", [](nb::handle comm, uintptr_t dst, size_t dst_pitch, uintptr_t src,
                                size_t src_pitch, size_t width, size_t height, int pe,
                                uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_put_2d_on_stream(c, ptr(dst), dst_pitch, ptr(src), src_pitch, width,
                                         height, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "dst_pitch"_a, "src"_a, "src_pitch"_a, "width"_a, "height"_a, "pe"_a,
      "stream"_a);
  m.def("put_signal_on_stream", [](nb::handle comm, uintptr_t dst, uintptr_t src, size_t bytes,
                                    uintptr_t sig, uint64_t value, int op, int pe,
                                    uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_put_signal_on_stream(c, ptr(dst), ptr(src), bytes, ptr<uint64_t>(sig),
                                             value, op, pe, ptr(stream));
        });
      }, "comm"_a, "dst"_a, "src"_a, "bytes"_a, "sig"_a, "value"_a, "op"_a, "pe"_a, "stream"_a);
  m.def("signal_op_on_stream", [](nb::handle comm, uintptr_t sig, uint64_t value, int op, int pe,
                                   uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_signal_op_on_stream(c, ptr<uint64_t>(sig), value, op, pe, ptr(stream));
        });
      }, "comm"_a, "sig"_a, "value"_a, "op"_a, "pe"_a, "stream"_a);
  m.def("signal_wait_until_on_stream", [](nb::handle comm, uintptr_t sig, int cmp, uint64_t value,
                                           uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_signal_wait_until_on_stream(c, ptr<uint64_t>(sig), cmp, value, ptr(stream));
        });
      }, "comm"_a, "sig"_a, "cmp"_a, "value"_a, "stream"_a);
  m.def("quiet_on_stream", [](nb::handle comm, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] { return gshmem_quiet_on_stream(c, ptr(stream)); });
      }, "comm"_a, "stream"_a);
  m.def("barrier_on_stream", [](nb::handle comm, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] { return gshmem_barrier_on_stream(c, ptr(stream)); });
      }, "comm"_a, "stream"_a);
}
