#include "proxy/ucx_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "common/error.h"

namespace gshmem::proxy {
namespace {

template <typename Fn>
void resolve(void* lib, const std::string& path, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (out == nullptr) {
    throw_error(GSHMEM_ERROR_SYSTEM, "UCX library " + path + " has no symbol " + name +
                                         " (gshmem needs UCX 1.15 or newer)");
  }
}

UcxApi load() {
  UcxApi api{};
  const char* chosen = std::getenv("GSHMEM_UCX_LIB");
  api.path = chosen != nullptr && *chosen != '\0' ? chosen : "libucp.so.0";
  // RTLD_LOCAL: UCX's symbols stay out of the global namespace, where a framework's own UCX
  // (for example one loaded by MPI) may already be.
  void* lib = dlopen(api.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    throw_error(GSHMEM_ERROR_SYSTEM,
                "UCX is needed for peers beyond load/store reach and could not be loaded from " +
                    api.path + " (" + (why != nullptr ? why : "unknown reason") +
                    "); install the libucx-cu13 wheel or a system UCX, or set GSHMEM_UCX_LIB "
                    "to a libucp.so");
  }
  resolve(lib, api.path, "ucp_config_read", api.config_read);
  resolve(lib, api.path, "ucp_config_release", api.config_release);
  resolve(lib, api.path, "ucp_init_version", api.init_version);
  resolve(lib, api.path, "ucp_cleanup", api.cleanup);
  resolve(lib, api.path, "ucp_worker_create", api.worker_create);
  resolve(lib, api.path, "ucp_worker_destroy", api.worker_destroy);
  resolve(lib, api.path, "ucp_worker_query", api.worker_query);
  resolve(lib, api.path, "ucp_worker_release_address", api.worker_release_address);
  resolve(lib, api.path, "ucp_worker_progress", api.worker_progress);
  resolve(lib, api.path, "ucp_worker_flush_nbx", api.worker_flush_nbx);
  resolve(lib, api.path, "ucp_ep_flush_nbx", api.ep_flush_nbx);
  resolve(lib, api.path, "ucp_ep_create", api.ep_create);
  resolve(lib, api.path, "ucp_ep_close_nbx", api.ep_close_nbx);
  resolve(lib, api.path, "ucp_mem_map", api.mem_map);
  resolve(lib, api.path, "ucp_mem_unmap", api.mem_unmap);
  resolve(lib, api.path, "ucp_rkey_pack", api.rkey_pack);
  resolve(lib, api.path, "ucp_rkey_buffer_release", api.rkey_buffer_release);
  resolve(lib, api.path, "ucp_ep_rkey_unpack", api.ep_rkey_unpack);
  resolve(lib, api.path, "ucp_rkey_destroy", api.rkey_destroy);
  resolve(lib, api.path, "ucp_put_nbx", api.put_nbx);
  resolve(lib, api.path, "ucp_get_nbx", api.get_nbx);
  resolve(lib, api.path, "ucp_am_send_nbx", api.am_send_nbx);
  resolve(lib, api.path, "ucp_worker_set_am_recv_handler", api.worker_set_am_recv_handler);
  resolve(lib, api.path, "ucp_am_recv_data_nbx", api.am_recv_data_nbx);
  resolve(lib, api.path, "ucp_am_data_release", api.am_data_release);
  resolve(lib, api.path, "ucp_request_check_status", api.request_check_status);
  resolve(lib, api.path, "ucp_request_free", api.request_free);
  resolve(lib, api.path, "ucs_status_string", api.status_string);  // libucs, a dependency
  return api;  // the library stays loaded for the process's life: UCX keeps global state
}

}  // namespace

const UcxApi& ucx_api() {
  // Loaded once; a failure is not cached, so setting GSHMEM_UCX_LIB and retrying works.
  static std::mutex mu;
  static UcxApi* api = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (api == nullptr) api = new UcxApi(load());
  return *api;
}

std::string ucx_failure(const char* what, ucs_status_t status) {
  return std::string(what) + ": " + ucx_api().status_string(status);
}

}  // namespace gshmem::proxy
