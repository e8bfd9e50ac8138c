#include "heap/symmetric_heap.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "common/cuda_api.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"

namespace gshmem {
namespace {

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

enum SeqOp : uint64_t { kMalloc = 1, kFree = 2 };

}  // namespace

SymmetricHeap::SymmetricHeap(Bootstrap& bootstrap, LocalChannel* channel, HeapConfig config)
    : bootstrap_(bootstrap), channel_(channel), config_(std::move(config)) {
  const auto& d = cuda::driver();
  my_slot_ = config_.local_index.at(bootstrap.rank());
  slots_ = 0;
  for (int li : config_.local_index) slots_ = std::max(slots_, li + 1);
  GSHMEM_REQUIRE(config_.slot_size % config_.granularity == 0,
                 "heap reserve must be a multiple of the allocation granularity");
  cuda::DeviceGuard guard(config_.device);
  cuda::check(d.mem_address_reserve(&va_, config_.slot_size * slots_, config_.granularity, 0, 0),
              ("reserving " + mib(config_.slot_size * slots_) +
               " of GPU address space for the symmetric heap (lower GSHMEM_HEAP_RESERVE?)")
                  .c_str());
  try {
    grow_to(config_.initial_bytes);
  } catch (...) {
    release_all();
    throw;
  }
}

SymmetricHeap::~SymmetricHeap() { release_all(); }

CUdeviceptr SymmetricHeap::own_base() const { return va_ + my_slot_ * config_.slot_size; }

void SymmetricHeap::release_all() noexcept {
  if (!va_) return;
  const auto& d = cuda::driver();
  // Not a DeviceGuard: nothing here may throw. Restores the thread's context, not a device
  // number (DeviceGuard says why).
  CUcontext previous = nullptr;
  d.ctx_get_current(&previous);
  cudaSetDevice(config_.device);
  for (auto it = mappings_.rbegin(); it != mappings_.rend(); ++it) {
    d.mem_unmap(it->first, it->second);
  }
  mappings_.clear();
  d.mem_address_free(va_, config_.slot_size * slots_);
  va_ = 0;
  if (previous != nullptr) d.ctx_set_current(previous);
}

void SymmetricHeap::check_sequence(uint64_t op, uint64_t a, uint64_t b) {
  sequence_hash_ = hash_combine(hash_combine(hash_combine(sequence_hash_, op), a), b);
  if (!config_.check_sequence) return;
  std::vector<uint64_t> all(bootstrap_.nranks());
  bootstrap_.allgather(&sequence_hash_, all.data(), sizeof(uint64_t));
  std::string differ;
  for (int r = 0; r < bootstrap_.nranks(); ++r) {
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differ.empty()) {
    broken_ = true;
    throw_error(GSHMEM_ERROR_HEAP,
                "symmetric heap: PE(s) " + differ + " made a different sequence of malloc/free "
                "calls (or sizes) than PE 0; every PE must make the same collective allocation "
                "calls in the same order with the same arguments (this comm's heap is now "
                "unusable; finalize it)");
  }
}

void SymmetricHeap::grow_to(uint64_t needed_end) {
  uint64_t old_end = allocator_.end();
  uint64_t new_end =
      round_up(std::max(needed_end, old_end + config_.grow_bytes), config_.granularity);
  if (new_end > config_.slot_size) new_end = round_up(needed_end, config_.granularity);
  if (new_end > config_.slot_size) {
    throw_error(GSHMEM_ERROR_HEAP,
                "symmetric heap exhausted: " + mib(needed_end) + " needed, " +
                    mib(config_.slot_size) + " reserved per PE; set GSHMEM_HEAP_RESERVE larger, "
                    "or free symmetric memory first");
  }
  const uint64_t size = new_end - old_end;
  const auto& d = cuda::driver();
  // Phase timestamps for the debug log (growth time is a headline figure: keep it visible).
  using clock = std::chrono::steady_clock;
  clock::time_point t[5];
  t[0] = clock::now();
  cuda::DeviceGuard guard(config_.device);
  const bool share = channel_ != nullptr && slots_ > 1;

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = config_.device;
  prop.requestedHandleTypes =
      share ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  CUmemGenericAllocationHandle handle{};
  CUresult created = d.mem_create(&handle, size, &prop, 0);

  // Every PE must succeed before anyone maps: a GPU that is fuller than the others fails here,
  // and all PEs then raise the same error instead of waiting for a chunk that never comes.
  t[1] = clock::now();
  int32_t ok = created == CUDA_SUCCESS;
  std::vector<int32_t> all_ok(bootstrap_.nranks());
  bootstrap_.allgather(&ok, all_ok.data(), sizeof ok);
  std::string failed;
  for (int r = 0; r < bootstrap_.nranks(); ++r) {
    if (!all_ok[r]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!failed.empty()) {
    if (ok) d.mem_release(handle);
    throw_error(GSHMEM_ERROR_HEAP, "symmetric heap: PE(s) " + failed + " could not allocate " +
                                       mib(size) + " of GPU memory to grow the heap (out of "
                                       "device memory?)");
  }

  broken_ = true;  // until every mapping below exists
  try {
    Fd exported;
    if (share) {
      int fd = -1;
      CUresult rc = d.mem_export(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (rc != CUDA_SUCCESS) d.mem_release(handle);
      cuda::check(rc, "exporting a heap chunk as a file descriptor");
      exported = Fd(fd);
    }
    CUdeviceptr own = own_base() + old_end;
    CUresult rc = d.mem_map(own, size, 0, handle, 0);
    d.mem_release(handle);  // the mapping keeps the memory alive
    cuda::check(rc, "mapping a heap chunk");
    mappings_.emplace_back(own, size);

    t[2] = clock::now();
    if (share) {
      std::vector<Fd> fds = channel_->exchange_fd(exported.get(), hash_combine(old_end, size));
      for (int q = 0; q < static_cast<int>(fds.size()); ++q) {
        if (q == my_slot_) continue;
        CUmemGenericAllocationHandle peer{};
        cuda::check(
            d.mem_import(&peer, reinterpret_cast<void*>(static_cast<uintptr_t>(fds[q].get())),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            ("importing local PE " + std::to_string(q) +
             "'s heap chunk (set GSHMEM_DISABLE_P2P=1 if GPUs cannot reach each other)")
                .c_str());
        CUdeviceptr at = va_ + q * config_.slot_size + old_end;
        CUresult mrc = d.mem_map(at, size, 0, peer, 0);
        d.mem_release(peer);
        cuda::check(mrc, "mapping a peer's heap chunk");
        mappings_.emplace_back(at, size);
      }
    }
    t[3] = clock::now();
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = config_.device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int q = 0; q < slots_; ++q) {
      if (!share && q != my_slot_) continue;
      cuda::check(d.mem_set_access(va_ + q * config_.slot_size + old_end, size, &access, 1),
                  ("enabling access to local PE " + std::to_string(q) +
                   "'s heap from this GPU (set GSHMEM_DISABLE_P2P=1 if GPUs cannot reach each "
                   "other)")
                      .c_str());
    }
  } catch (const Error& e) {
    throw_error(e.code(), std::string(e.what()) +
                              " (the heap could not grow; this comm is unusable: finalize it)");
  }
  t[4] = clock::now();
  broken_ = false;
  allocator_.grow(new_end);
  auto ms = [&](int i) {
    return std::chrono::duration<double, std::milli>(t[i + 1] - t[i]).count();
  };
  log_debug(bootstrap_.rank(),
            "heap grew by %llu MiB to %llu MiB (%d slot(s)): create %.2f ms, agree+export+map "
            "%.2f ms, exchange+import+map peers %.2f ms, set access %.2f ms",
            static_cast<unsigned long long>(size >> 20),
            static_cast<unsigned long long>(new_end >> 20), share ? slots_ : 1, ms(0), ms(1), ms(2),
            ms(3));
  if (grow_hook_) grow_hook_();
}

void* SymmetricHeap::malloc(uint64_t size, uint64_t alignment, bool zero) {
  GSHMEM_REQUIRE(!broken_,
                 "symmetric heap is unusable after an earlier failure; finalize the comm");
  GSHMEM_REQUIRE(size > 0, "symmetric allocation size must be positive");
  GSHMEM_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0,
                 "alignment must be a power of two, got " + std::to_string(alignment));
  check_sequence(kMalloc, size, alignment);
  std::optional<uint64_t> offset = allocator_.allocate(size, alignment);
  if (!offset) {
    grow_to(allocator_.end_needed(size, alignment));
    offset = allocator_.allocate(size, alignment);
  }
  GSHMEM_REQUIRE(offset.has_value(), "internal error: no space after growing the heap");
  void* ptr = reinterpret_cast<void*>(own_base() + *offset);
  if (zero) {
    cuda::DeviceGuard guard(config_.device);
    cuda::check(cudaMemset(ptr, 0, size), "zeroing symmetric memory");
    cuda::check(cudaDeviceSynchronize(), "zeroing symmetric memory");
    bootstrap_.barrier();  // nobody writes to a peer's block before the peer has zeroed it
  }
  return ptr;
}

void SymmetricHeap::free(void* ptr) {
  GSHMEM_REQUIRE(contains(ptr), "free: pointer is not in this comm's symmetric heap");
  uint64_t offset = reinterpret_cast<CUdeviceptr>(ptr) - own_base();
  auto live = allocator_.find_live(offset);
  GSHMEM_REQUIRE(live && live->first == offset,
                 "free: pointer is not the start of a live symmetric allocation (double free?)");
  check_sequence(kFree, live->second, 0);
  {
    cuda::DeviceGuard guard(config_.device);
    cuda::check(cudaDeviceSynchronize(), "waiting for GPU work before free");
  }
  bootstrap_.barrier();  // no PE may still be using the block
  allocator_.release(offset);
}

bool SymmetricHeap::contains(const void* ptr) const {
  auto p = reinterpret_cast<CUdeviceptr>(ptr);
  return va_ && p >= own_base() && p < own_base() + allocator_.end();
}

void* SymmetricHeap::peer_ptr(const void* ptr, int pe) const {
  GSHMEM_REQUIRE(pe >= 0 && pe < static_cast<int>(config_.local_index.size()),
                 "PE " + std::to_string(pe) + " is outside [0, " +
                     std::to_string(config_.local_index.size()) + ")");
  GSHMEM_REQUIRE(contains(ptr), "pointer is not in this comm's symmetric heap");
  int li = config_.local_index[pe];
  if (li < 0) return nullptr;
  uint64_t offset = reinterpret_cast<CUdeviceptr>(ptr) - own_base();
  return reinterpret_cast<void*>(va_ + li * config_.slot_size + offset);
}

}  // namespace gshmem
