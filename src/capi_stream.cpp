// The on-stream section of the C ABI (include/gshmem/gshmem.h): resolves the handle and the
// stream, then hands over to src/stream/ops.h, which checks the arguments and enqueues.
#include <cuda_runtime_api.h>

#include "capi_internal.h"
#include "gshmem/gshmem.h"
#include "stream/ops.h"

using gshmem::capi::guarded;
using gshmem::capi::as_stream;
using gshmem::capi::live;

extern "C" {

gshmem_result_t gshmem_put_on_stream(gshmem_comm_t comm, void* dst_sym, const void* src,
                                     size_t bytes, int pe, void* stream) {
  return guarded([&] {
    gshmem::stream::put(live(comm), dst_sym, src, bytes, pe, as_stream(stream));
  });
}

gshmem_result_t gshmem_get_on_stream(gshmem_comm_t comm, void* dst, const void* src_sym,
                                     size_t bytes, int pe, void* stream) {
  return guarded([&] {
    gshmem::stream::get(live(comm), dst, src_sym, bytes, pe, as_stream(stream));
  });
}

gshmem_result_t gshmem_put_2d_on_stream(gshmem_comm_t comm, void* dst_sym, size_t dst_pitch,
                                        const void* src, size_t src_pitch, size_t width,
                                        size_t height, int pe, void* stream) {
  return guarded([&] {
    gshmem::stream::put_2d(live(comm), dst_sym, dst_pitch, src, src_pitch, width, height, pe,
                           as_stream(stream));
  });
}

gshmem_result_t gshmem_put_signal_on_stream(gshmem_comm_t comm, void* dst_sym, const void* src,
                                            size_t bytes, uint64_t* sig_sym, uint64_t value,
                                            int op, int pe, void* stream) {
  return guarded([&] {
    gshmem::stream::put_signal(live(comm), dst_sym, src, bytes, sig_sym, value, op, pe,
                               as_stream(stream));
  });
}

gshmem_result_t gshmem_signal_op_on_stream(gshmem_comm_t comm, uint64_t* sig_sym, uint64_t value,
                                           int op, int pe, void* stream) {
  return guarded([&] {
    gshmem::stream::signal_op(live(comm), sig_sym, value, op, pe, as_stream(stream));
  });
}

gshmem_result_t gshmem_signal_wait_until_on_stream(gshmem_comm_t comm, uint64_t* sig_sym, int cmp,
                                                   uint64_t value, void* stream) {
  return guarded([&] {
    gshmem::stream::signal_wait_until(live(comm), sig_sym, cmp, value, as_stream(stream));
  });
}

gshmem_result_t gshmem_quiet_on_stream(gshmem_comm_t comm, void* stream) {
  return guarded([&] { gshmem::stream::quiet(live(comm), as_stream(stream)); });
}

gshmem_result_t gshmem_barrier_on_stream(gshmem_comm_t comm, void* stream) {
  return guarded([&] { gshmem::stream::barrier(live(comm), as_stream(stream)); });
}

}  // extern "C"
