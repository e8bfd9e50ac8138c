// The NCCL backend (nccl.h): libnccl is opened with dlopen at run time and its entry points are
// resolved by name. The prototypes below are written from NCCL's public API documentation (the
// few types they need are declared here; NCCL's headers are not used), and checked against the
// library's version at load time (>= 2.18; bfloat16 needs >= 2.10).
#include "coll/nccl.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "coll/validate.h"
#include "common/cuda_api.h"
#include "common/error.h"
#include "common/log.h"
#include "core/comm.h"

namespace gshmem::coll {
namespace {

// --- NCCL's public C API, as far as this backend uses it ----------------------------------------
using ncclResult_t = int;  // ncclSuccess = 0
constexpr ncclResult_t kNcclSuccess = 0;
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
using ncclDataType_t = int;  // ncclInt32 = 2, ncclInt64 = 4, ncclFloat16 = 6, ncclFloat32 = 7,
                             // ncclBfloat16 = 9
using ncclRedOp_t = int;     // ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3

using GetVersionFn = ncclResult_t (*)(int*);
using GetUniqueIdFn = ncclResult_t (*)(ncclUniqueId*);
using CommInitRankFn = ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int);
using CommDestroyFn = ncclResult_t (*)(ncclComm_t);
using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                     ncclComm_t, cudaStream_t);
using AllGatherFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                     cudaStream_t);
using ReduceScatterFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                         ncclComm_t, cudaStream_t);
using BroadcastFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                     cudaStream_t);
using SendFn = ncclResult_t (*)(const void*, size_t, ncclDataType_t, int, ncclComm_t,
                                cudaStream_t);
using RecvFn = ncclResult_t (*)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
using GroupFn = ncclResult_t (*)();
using ErrorStringFn = const char* (*)(ncclResult_t);

constexpr int kMinVersion = 21800;  // 2.18.0 (codes are major * 10000 + minor * 100 + patch)

struct Api {
  void* handle = nullptr;
  std::string path;
  int version = 0;
  GetVersionFn get_version = nullptr;
  GetUniqueIdFn get_unique_id = nullptr;
  CommInitRankFn comm_init_rank = nullptr;
  CommDestroyFn comm_destroy = nullptr;
  CommDestroyFn comm_abort = nullptr;  // optional: releases without waiting for peers
  AllReduceFn all_reduce = nullptr;
  AllGatherFn all_gather = nullptr;
  ReduceScatterFn reduce_scatter = nullptr;
  BroadcastFn broadcast = nullptr;
  SendFn send = nullptr;
  RecvFn recv = nullptr;
  GroupFn group_start = nullptr;
  GroupFn group_end = nullptr;
  ErrorStringFn error_string = nullptr;
};

std::string version_text(int code) {
  int major = code / 10000, minor = (code / 100) % 100, patch = code % 100;
  if (code < 10000) major = code / 1000, minor = (code / 100) % 10, patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// Where to look, in order: GSHMEM_NCCL_LIBRARY alone when set; else libnccl.so.2 by the loader's
// search (an NCCL already loaded by the process, e.g. torch's, is found this way), then each
// folder of GSHMEM_NCCL_SEARCH_PATH (colon-separated; the Python layer sets it to the
// nvidia-nccl wheel's lib folder when that wheel is installed).
std::vector<std::string> candidates(const std::string& explicit_path) {
  if (!explicit_path.empty()) return {explicit_path};
  if (const char* v = std::getenv("GSHMEM_NCCL_LIBRARY"); v && *v) return {v};
  std::vector<std::string> c = {"libnccl.so.2", "libnccl.so"};
  if (const char* dirs = std::getenv("GSHMEM_NCCL_SEARCH_PATH"); dirs && *dirs) {
    std::string s(dirs);
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) c.push_back(s.substr(start, end - start) + "/libnccl.so.2");
      start = end + 1;
    }
  }
  return c;
}

template <typename F>
bool resolve(Api& api, F& fn, const char* symbol, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(api.handle, symbol));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + symbol;
  return fn != nullptr;
}

// Loads and checks the library; on failure returns false with `why` set and nothing left open.
bool load(Api& api, const std::string& explicit_path, std::string& why) {
  std::vector<std::string> paths = candidates(explicit_path);
  std::string tried;
  for (const auto& p : paths) {
    dlerror();
    api.handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.handle) {
      api.path = p;
      break;
    }
    const char* e = dlerror();
    tried += "\n  " + p + ": " + (e ? e : "not found");
  }
  if (!api.handle) {
    why = "could not load the NCCL library (tried:" + tried +
          ")\n  install NCCL (pip install nvidia-nccl-cu12, or the system package) or set "
          "GSHMEM_NCCL_LIBRARY to the path of libnccl.so.2";
    return false;
  }
  std::string missing;
  resolve(api, api.get_version, "ncclGetVersion", missing);
  resolve(api, api.get_unique_id, "ncclGetUniqueId", missing);
  resolve(api, api.comm_init_rank, "ncclCommInitRank", missing);
  resolve(api, api.comm_destroy, "ncclCommDestroy", missing);
  resolve(api, api.all_reduce, "ncclAllReduce", missing);
  resolve(api, api.all_gather, "ncclAllGather", missing);
  resolve(api, api.reduce_scatter, "ncclReduceScatter", missing);
  resolve(api, api.broadcast, "ncclBroadcast", missing);
  resolve(api, api.send, "ncclSend", missing);
  resolve(api, api.recv, "ncclRecv", missing);
  resolve(api, api.group_start, "ncclGroupStart", missing);
  resolve(api, api.group_end, "ncclGroupEnd", missing);
  resolve(api, api.error_string, "ncclGetErrorString", missing);
  api.comm_abort = reinterpret_cast<CommDestroyFn>(dlsym(api.handle, "ncclCommAbort"));
  if (!missing.empty()) {
    why = api.path + " is not an NCCL library this backend can use: missing " + missing;
  } else if (api.get_version(&api.version) != kNcclSuccess) {
    why = api.path + ": ncclGetVersion failed";
  } else if (api.version < kMinVersion) {
    why = api.path + " is NCCL " + version_text(api.version) + "; gshmem needs NCCL 2.18 or newer";
  } else {
    return true;
  }
  dlclose(api.handle);
  api = Api{};
  return false;
}

// Fixed-size messages for the bootstrap (every PE must send the same number of bytes).
constexpr size_t kWhyBytes = 480;
struct Status {
  int32_t ok;
  int32_t version;
  char why[kWhyBytes];
};
struct IdMessage {
  int32_t ok;
  char why[kWhyBytes];
  ncclUniqueId id;
};

void set_why(char (&dst)[kWhyBytes], const std::string& why) {
  std::memset(dst, 0, kWhyBytes);
  std::strncpy(dst, why.c_str(), kWhyBytes - 1);
}

// Every PE's status; throws the same usage error on every PE when any failed.
void agree(Comm& comm, bool ok, const std::string& why, const char* stage, int version = 0) {
  Status mine{};
  mine.ok = ok ? 1 : 0;
  mine.version = version;
  set_why(mine.why, why);
  std::vector<Status> all(static_cast<size_t>(comm.nranks()));
  comm.bootstrap().allgather(&mine, all.data(), sizeof mine);
  std::string failed, first_why;
  for (int r = 0; r < comm.nranks(); ++r) {
    if (all[r].ok) continue;
    failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    if (first_why.empty()) first_why = "PE " + std::to_string(r) + ": " + all[r].why;
  }
  if (!failed.empty()) {
    throw_error(GSHMEM_ERROR_USAGE, std::string("NCCL is not available (") + stage +
                                        " failed on PE(s) " + failed + "): " + first_why +
                                        "\n  gshmem's own collectives keep working without it");
  }
  if (version) {
    for (int r = 0; r < comm.nranks(); ++r) {
      if (all[r].version != version) {
        throw_error(GSHMEM_ERROR_USAGE,
                    "NCCL is not available: the PEs loaded different NCCL versions (PE 0: " +
                        version_text(all[0].version) + ", PE " + std::to_string(r) + ": " +
                        version_text(all[r].version) + "); use one NCCL on every PE");
      }
    }
  }
}

int nccl_dtype(gshmem_dtype_t dtype) {
  switch (dtype) {
    case GSHMEM_FLOAT32: return 7;
    case GSHMEM_BFLOAT16: return 9;
    case GSHMEM_FLOAT16: return 6;
    case GSHMEM_INT32: return 2;
    case GSHMEM_INT64: return 4;
  }
  throw_error(GSHMEM_ERROR_USAGE, "unsupported dtype " + std::to_string(static_cast<int>(dtype)));
}

int nccl_op(gshmem_redop_t op) {
  switch (op) {
    case GSHMEM_SUM: return 0;
    case GSHMEM_PROD: return 1;
    case GSHMEM_MAX: return 2;
    case GSHMEM_MIN: return 3;
  }
  throw_error(GSHMEM_ERROR_USAGE, "unsupported reduction " + std::to_string(static_cast<int>(op)));
}

}  // namespace

struct NcclBackend::Impl {
  Api api;
  ncclComm_t comm = nullptr;
  int device = 0;
  int rank = 0;
  int nranks = 0;

  void check(ncclResult_t rc, const char* what) const {
    if (rc == kNcclSuccess) return;
    const char* msg = api.error_string ? api.error_string(rc) : "unknown error";
    throw_error(GSHMEM_ERROR_SYSTEM, std::string("NCCL ") + what + " failed: " + (msg ? msg : "?") +
                                         " (NCCL_DEBUG=WARN says more)");
  }
};

NcclProbe probe_nccl(const std::string& library) {
  Api api;
  NcclProbe p;
  p.ok = load(api, library, p.why);
  if (p.ok) {
    p.version = api.version;
    p.path = api.path;
    dlclose(api.handle);
  }
  return p;
}

std::unique_ptr<NcclBackend> NcclBackend::create(Comm& comm) {
  auto impl = std::make_unique<Impl>();
  impl->device = comm.device();
  impl->rank = comm.rank();
  impl->nranks = comm.nranks();
  std::string why;
  bool ok = load(impl->api, "", why);
  // Release the library on any failure from here on (the handle closes below).
  struct Closer {
    Impl& i;
    bool keep = false;
    ~Closer() {
      if (!keep && i.api.handle) dlclose(i.api.handle);
    }
  } closer{*impl};
  agree(comm, ok, why, "loading the library", ok ? impl->api.version : 0);

  IdMessage msg{};
  if (comm.rank() == 0) {
    try {
      cuda::DeviceGuard guard(impl->device);
      ncclResult_t rc = impl->api.get_unique_id(&msg.id);
      if (rc != kNcclSuccess) {
        set_why(msg.why, std::string("ncclGetUniqueId failed: ") + impl->api.error_string(rc));
      } else {
        msg.ok = 1;
      }
    } catch (const Error& e) {
      set_why(msg.why, e.what());
    }
  }
  comm.bootstrap().broadcast(&msg, sizeof msg, 0);
  if (!msg.ok) {
    throw_error(GSHMEM_ERROR_USAGE, std::string("NCCL is not available: on PE 0, ") + msg.why);
  }

  std::string init_why;
  try {
    cuda::DeviceGuard guard(impl->device);
    ncclResult_t rc = impl->api.comm_init_rank(&impl->comm, comm.nranks(), msg.id, comm.rank());
    if (rc != kNcclSuccess) {
      impl->comm = nullptr;
      init_why = std::string("ncclCommInitRank failed: ") + impl->api.error_string(rc);
    }
  } catch (const Error& e) {
    init_why = e.what();
  }
  try {
    agree(comm, init_why.empty(), init_why, "creating the NCCL communicator");
  } catch (...) {
    if (impl->comm) {
      (impl->api.comm_abort ? impl->api.comm_abort : impl->api.comm_destroy)(impl->comm);
    }
    throw;
  }
  closer.keep = true;
  log_debug(comm.rank(), "NCCL %s enabled from %s (%d ranks)",
            version_text(impl->api.version).c_str(), impl->api.path.c_str(), comm.nranks());
  return std::unique_ptr<NcclBackend>(new NcclBackend(std::move(impl)));
}

NcclBackend::NcclBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclBackend::~NcclBackend() {
  if (!impl_) return;
  // Comm::abort() (also the end of finalize) releases us: ncclCommAbort never waits for peers,
  // which matters when one has gone; finalize has already synchronized the device and the PEs.
  if (impl_->comm) {
    (impl_->api.comm_abort ? impl_->api.comm_abort : impl_->api.comm_destroy)(impl_->comm);
  }
  // The library stays loaded: NCCL keeps threads and CUDA state that must not lose their code.
}

int NcclBackend::version() const { return impl_->api.version; }

void NcclBackend::all_reduce(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                             gshmem_redop_t op, cudaStream_t stream) {
  impl_->check(impl_->api.all_reduce(in, out, count, nccl_dtype(dtype), nccl_op(op), impl_->comm,
                                     stream),
               "all_reduce");
}

void NcclBackend::all_gather(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                             cudaStream_t stream) {
  impl_->check(impl_->api.all_gather(in, out, count, nccl_dtype(dtype), impl_->comm, stream),
               "all_gather");
}

void NcclBackend::reduce_scatter(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                                 gshmem_redop_t op, cudaStream_t stream) {
  impl_->check(impl_->api.reduce_scatter(in, out, count, nccl_dtype(dtype), nccl_op(op),
                                         impl_->comm, stream),
               "reduce_scatter");
}

void NcclBackend::broadcast(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                            int root, cudaStream_t stream) {
  impl_->check(impl_->api.broadcast(in, out, count, nccl_dtype(dtype), root, impl_->comm, stream),
               "broadcast");
}

void NcclBackend::all_to_all(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                             cudaStream_t stream) {
  const int t = nccl_dtype(dtype);
  const size_t chunk = count * element_size(dtype, "all_to_all");
  auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  impl_->check(impl_->api.group_start(), "all_to_all (ncclGroupStart)");
  ncclResult_t rc = kNcclSuccess;
  for (int peer = 0; peer < impl_->nranks && rc == kNcclSuccess; ++peer) {
    rc = impl_->api.send(src + peer * chunk, count, t, peer, impl_->comm, stream);
    if (rc == kNcclSuccess) {
      rc = impl_->api.recv(dst + peer * chunk, count, t, peer, impl_->comm, stream);
    }
  }
  ncclResult_t end = impl_->api.group_end();  // always close the group
  impl_->check(rc, "all_to_all (ncclSend/ncclRecv)");
  impl_->check(end, "all_to_all (ncclGroupEnd)");
}

}  // namespace gshmem::coll
