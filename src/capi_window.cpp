// The windows section of the C ABI (include/gshmem/gshmem.h). A gshmem_window_handle_t is the
// comm's Window itself: the comm owns it, and deregister checks it is one of the comm's.
#include "capi_internal.h"
#include "core/window.h"
#include "gshmem/gshmem.h"

using gshmem::capi::guarded;
using gshmem::capi::live;
using gshmem::capi::require_out;

namespace {

gshmem::Window* window_of(gshmem_window_handle_t win) {
  return reinterpret_cast<gshmem::Window*>(win);
}

}  // namespace

extern "C" {

gshmem_result_t gshmem_window_register(gshmem_comm_t comm, void* ptr, size_t bytes, int contexts,
                                       int signals, int counters, gshmem_window_handle_t* win) {
  return guarded([&] {
    require_out(win, "win");
    gshmem::Window& w = live(comm).register_window(ptr, bytes, contexts, signals, counters);
    *win = reinterpret_cast<gshmem_window_handle_t>(&w);
  });
}

gshmem_result_t gshmem_window_device(gshmem_window_handle_t win, gshmem_window_t* state) {
  return guarded([&] {
    require_out(state, "state");
    GSHMEM_REQUIRE(win != nullptr, "win is NULL");
    *state = window_of(win)->device();
  });
}

gshmem_result_t gshmem_window_deregister(gshmem_comm_t comm, gshmem_window_handle_t win) {
  return guarded([&] { live(comm).deregister_window(window_of(win)); });
}

}  // extern "C"
