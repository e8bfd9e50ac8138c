// make_ucx_engine for builds that found no UCX headers: the proxy path reports why it is absent.
#include "common/error.h"
#include "proxy/net_engine.h"

namespace gshmem::proxy {

std::string ucx_unavailable() {
  return "this gshmem was built without UCX, which peers beyond load/store reach need: "
         "install the libucx-cu13 wheel (or a system UCX with headers) and rebuild gshmem";
}

std::unique_ptr<NetEngine> make_ucx_engine(Bootstrap&, double, size_t, size_t, bool) {
  throw_error(GSHMEM_ERROR_SYSTEM, ucx_unavailable());
}

}  // namespace gshmem::proxy
