#include "core/device_state.h"

#include <vector>

#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "core/comm.h"
#include "team/team.h"

namespace gshmem {

void DeviceState::DeviceFree::operator()(int32_t* p) const noexcept {
  try {
    cuda::DeviceGuard guard(device);
    cudaFree(p);  // nothing more to do if it fails during teardown
  } catch (const Error&) {
  }
}

DeviceState::DeviceState(Comm& comm) : local_index_(nullptr, DeviceFree{comm.device()}) {
  SymmetricHeap& heap = comm.heap();
  const int n = comm.nranks();
  const std::vector<int>& index = heap.local_index();
  void* sync = heap.malloc(2 * sizeof(uint64_t) * static_cast<uint64_t>(n), 256, true);

  std::vector<int32_t> table(index.begin(), index.end());
  std::vector<int> reachable;
  for (int q = 0; q < n; ++q) {
    if (index[q] >= 0) reachable.push_back(q);
  }
  {
    cuda::DeviceGuard guard(comm.device());
    int32_t* p = nullptr;
    cuda::check(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(int32_t) * n),
                "allocating the PE table");
    local_index_.reset(p);
    cuda::check(cudaMemcpy(p, table.data(), sizeof(int32_t) * n, cudaMemcpyHostToDevice),
                "copying the PE table");
  }

  state_.version = GSHMEM_DEVICE_STATE_VERSION;
  state_.my_pe = comm.rank();
  state_.n_pes = n;
  state_.my_slot = index[comm.rank()];
  state_.heap_base = reinterpret_cast<uint64_t>(heap.base());
  state_.slot_base = heap.slot_base();
  state_.slot_size = heap.slot_size();
  state_.local_index = reinterpret_cast<uint64_t>(local_index_.get());
  state_.sync = reinterpret_cast<uint64_t>(sync);
  state_.world = team::world(comm.rank(), n);
  state_.node = team::from_members(reachable, comm.rank());
  state_.timeout_ns = static_cast<uint64_t>(env::timeout_seconds() * 1e9);
  state_.fault = comm.faults().record_address();
  state_.fault_claim = comm.faults().claim_address();
  if (ProxyPath* path = comm.proxy()) {
    const proxy::QueueView& q = path->queue();
    state_.proxy_slots = reinterpret_cast<uint64_t>(q.slots);
    state_.proxy_tail = reinterpret_cast<uint64_t>(q.tail);
    state_.proxy_head = reinterpret_cast<uint64_t>(q.head);
    state_.proxy_capacity = q.capacity;
    state_.proxy_inline = reinterpret_cast<uint64_t>(q.inline_data);
    state_.proxy_retired = reinterpret_cast<uint64_t>(path->completion().retired);
    state_.proxy_failed = reinterpret_cast<uint64_t>(path->completion().failed);
    state_.proxy_results = reinterpret_cast<uint64_t>(path->completion().results);
  }
}

}  // namespace gshmem
