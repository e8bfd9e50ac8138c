// The C ABI (include/gshmem/gshmem.h): argument checks, then the C++ runtime; every exception
// becomes a result code plus a per-thread message.
#include <cstring>
#include <memory>
#include <string>

#include "bootstrap/unique_id.h"
#include "capi_internal.h"
#include "common/error.h"
#include "core/comm.h"
#include "gshmem/gshmem.h"

using gshmem::capi::guarded;
using gshmem::capi::live;
using gshmem::capi::require_out;

std::string& gshmem::capi::last_error() {
  thread_local std::string message;
  return message;
}

extern "C" {

const char* gshmem_last_error(void) { return gshmem::capi::last_error().c_str(); }

gshmem_result_t gshmem_unique_id_create(gshmem_unique_id_t* id, const char* address, int port,
                                        int listen) {
  return guarded([&] {
    require_out(id, "id");
    GSHMEM_REQUIRE(port >= 0 && port <= 65535, "port must be in [0, 65535]");
    *id = gshmem::UniqueId::create(address ? address : "", static_cast<uint16_t>(port), listen != 0)
              .encode();
  });
}

gshmem_result_t gshmem_unique_id_describe(const gshmem_unique_id_t* id, char* out, size_t len) {
  return guarded([&] {
    require_out(id, "id");
    require_out(out, "out");
    std::string s = gshmem::UniqueId::decode(*id).describe();
    GSHMEM_REQUIRE(len > s.size(), "output buffer too small");
    std::memcpy(out, s.c_str(), s.size() + 1);
  });
}

gshmem_result_t gshmem_comm_init(gshmem_comm_t* comm, const gshmem_unique_id_t* id, int rank,
                                 int nranks, int device) {
  return guarded([&] {
    require_out(comm, "comm");
    require_out(id, "id");
    *comm = nullptr;
    auto handle = std::make_unique<gshmem_comm>();
    handle->impl =
        std::make_unique<gshmem::Comm>(gshmem::UniqueId::decode(*id), rank, nranks, device);
    *comm = handle.release();
  });
}

gshmem_result_t gshmem_comm_finalize(gshmem_comm_t comm) {
  gshmem_result_t rc = guarded([&] { live(comm).finalize(); });
  if (comm) delete comm;
  return rc;
}

gshmem_result_t gshmem_comm_abort(gshmem_comm_t comm) {
  return guarded([&] {
    GSHMEM_REQUIRE(comm != nullptr, "comm is NULL");
    delete comm;
  });
}

gshmem_result_t gshmem_comm_check(gshmem_comm_t comm) {
  return guarded([&] { live(comm); });
}

gshmem_result_t gshmem_comm_info(gshmem_comm_t comm, gshmem_comm_info_t* info) {
  return guarded([&] {
    require_out(info, "info");
    gshmem::Comm& c = live(comm);
    gshmem::SymmetricHeap& heap = c.heap();
    info->rank = c.rank();
    info->nranks = c.nranks();
    info->local_rank = c.local_rank();
    info->local_size = c.local_size();
    info->device = c.device();
    info->heap_reserved = heap.reserved();
    info->heap_mapped = heap.mapped();
    info->heap_in_use = heap.in_use();
    info->heap_base = heap.base();
  });
}

gshmem_result_t gshmem_barrier_host(gshmem_comm_t comm) {
  return guarded([&] { live(comm).bootstrap().barrier(); });
}

gshmem_result_t gshmem_malloc(gshmem_comm_t comm, size_t size, size_t alignment, void** ptr) {
  return guarded([&] {
    require_out(ptr, "ptr");
    *ptr = live(comm).heap().malloc(size, alignment ? alignment : 256, false);
  });
}

gshmem_result_t gshmem_calloc(gshmem_comm_t comm, size_t size, size_t alignment, void** ptr) {
  return guarded([&] {
    require_out(ptr, "ptr");
    *ptr = live(comm).heap().malloc(size, alignment ? alignment : 256, true);
  });
}

gshmem_result_t gshmem_free(gshmem_comm_t comm, void* ptr) {
  return guarded([&] { live(comm).heap().free(ptr); });
}

gshmem_result_t gshmem_ptr(gshmem_comm_t comm, const void* ptr, int pe, void** peer_ptr) {
  return guarded([&] {
    require_out(peer_ptr, "peer_ptr");
    *peer_ptr = live(comm).heap().peer_ptr(ptr, pe);
  });
}

}  // extern "C"
