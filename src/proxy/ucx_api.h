// The UCX functions the network engine calls, resolved from libucp when first needed (dlopen),
// so that libgshmem neither links UCX nor needs it where every peer is load/store-reachable.
// Compiled only when the build found UCX's headers (the libucx wheel's, or a system UCX).
#pragma once

#include <ucp/api/ucp.h>

#include <string>

namespace gshmem::proxy {

struct UcxApi {
  decltype(&ucp_config_read) config_read;
  decltype(&ucp_config_release) config_release;
  decltype(&ucp_init_version) init_version;
  decltype(&ucp_cleanup) cleanup;
  decltype(&ucp_worker_create) worker_create;
  decltype(&ucp_worker_destroy) worker_destroy;
  decltype(&ucp_worker_query) worker_query;
  decltype(&ucp_worker_release_address) worker_release_address;
  decltype(&ucp_worker_progress) worker_progress;
  decltype(&ucp_worker_flush_nbx) worker_flush_nbx;
  decltype(&ucp_ep_flush_nbx) ep_flush_nbx;
  decltype(&ucp_ep_create) ep_create;
  decltype(&ucp_ep_close_nbx) ep_close_nbx;
  decltype(&ucp_mem_map) mem_map;
  decltype(&ucp_mem_unmap) mem_unmap;
  decltype(&ucp_rkey_pack) rkey_pack;
  decltype(&ucp_rkey_buffer_release) rkey_buffer_release;
  decltype(&ucp_ep_rkey_unpack) ep_rkey_unpack;
  decltype(&ucp_rkey_destroy) rkey_destroy;
  decltype(&ucp_put_nbx) put_nbx;
  decltype(&ucp_get_nbx) get_nbx;
  decltype(&ucp_am_send_nbx) am_send_nbx;
  decltype(&ucp_worker_set_am_recv_handler) worker_set_am_recv_handler;
  decltype(&ucp_am_recv_data_nbx) am_recv_data_nbx;
  decltype(&ucp_am_data_release) am_data_release;
  decltype(&ucp_request_check_status) request_check_status;
  decltype(&ucp_request_free) request_free;
  decltype(&ucs_status_string) status_string;
  std::string path;  // the libucp that was loaded
};

// Loads libucp once per process: GSHMEM_UCX_LIB (a path to libucp.so) when set, else the
// system's libucp.so.0. Throws GSHMEM_ERROR_SYSTEM naming the library and the loader's
// reason when it cannot (the job then has no network path).
const UcxApi& ucx_api();

// "what: UCX status text" for a failed UCX call.
std::string ucx_failure(const char* what, ucs_status_t status);

}  // namespace gshmem::proxy
