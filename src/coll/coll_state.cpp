#include "coll/coll_state.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "coll/kernels.h"
#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "core/comm.h"

namespace gshmem::coll {
namespace {

constexpr uint64_t kDefaultScratch = 32ull << 20;
constexpr int kDefaultCtas = 64;

uint64_t scratch_from_env() {
  const char* v = std::getenv("GSHMEM_COLL_SCRATCH_BYTES");
  if (v == nullptr || *v == '\0') return kDefaultScratch;
  return env::parse_size(v, "GSHMEM_COLL_SCRATCH_BYTES");
}

int ctas_from_env() {
  const char* v = std::getenv("GSHMEM_COLL_CTAS");
  if (v == nullptr || *v == '\0') return kDefaultCtas;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  GSHMEM_REQUIRE(end != v && *end == '\0' && n >= 1 && n <= kMaxCtas,
                 std::string("GSHMEM_COLL_CTAS=") + v + " is not a CTA count; use 1.." +
                     std::to_string(kMaxCtas));
  return static_cast<int>(n);
}

bool check_from_env() {
  const char* v = std::getenv("GSHMEM_COLL_CHECK");
  if (v == nullptr || *v == '\0') return false;
  const std::string s(v);
  GSHMEM_REQUIRE(s == "0" || s == "1", "GSHMEM_COLL_CHECK=" + s + " is not 0 or 1");
  return s == "1";
}

uint64_t round_down(uint64_t x, uint64_t a) { return x / a * a; }

struct Settings {
  uint64_t slot_bytes;
  int64_t ctas;
  int64_t check;
};

}  // namespace

CollState::CollState(Comm& comm) {
  const uint64_t n = static_cast<uint64_t>(comm.nranks());
  Settings mine{round_down(scratch_from_env() / (2 * n), 4096), ctas_from_env(),
                check_from_env() ? 1 : 0};
  GSHMEM_REQUIRE(mine.slot_bytes >= 64 * 1024,
                 "GSHMEM_COLL_SCRATCH_BYTES is too small for " + std::to_string(n) +
                     " PEs: it must give each of the 2 x " + std::to_string(n) +
                     " staging slots at least 64 KiB (use at least " +
                     std::to_string(2 * n * 64) + "K)");
  std::vector<Settings> all(n);
  comm.bootstrap().allgather(&mine, all.data(), sizeof mine);
  for (uint64_t r = 0; r < n; ++r) {
    GSHMEM_REQUIRE(all[r].slot_bytes == mine.slot_bytes && all[r].ctas == mine.ctas &&
                       all[r].check == mine.check,
                   "GSHMEM_COLL_SCRATCH_BYTES / GSHMEM_COLL_CTAS / GSHMEM_COLL_CHECK differ "
                   "between PE " +
                       std::to_string(comm.rank()) + " and PE " + std::to_string(r) +
                       "; set them to the same values on every PE");
  }

  const uint64_t counters = static_cast<uint64_t>(kMaxCtas) * n * sizeof(uint64_t);
  const uint64_t slots = 2 * n * mine.slot_bytes;
  const uint64_t descs = 2 * n * sizeof(uint64_t);
  const uint64_t permute_packets = 2 * n * kPermuteSlotBytes;
  const uint64_t permute_bulk = 2 * n * kPermuteBulkSlotBytes;
  const uint64_t permute_counters =
      4 * static_cast<uint64_t>(kPermuteRegions) * n * sizeof(uint64_t);
  const uint64_t permute_flags = 2 * n * sizeof(uint64_t);
  const uint64_t before_exchange = 3 * counters + slots + descs + permute_packets +
                                   permute_bulk + permute_counters + permute_flags;
  // Reductions through the proxy stage in slots of their own (exchange.cpp), 4 KiB-aligned for
  // the reduce kernel's 16-byte loads: half the scratch, only on comms with a proxy path.
  const uint64_t exchange_at = (before_exchange + 4095) / 4096 * 4096;
  const uint64_t exchange = comm.proxy() != nullptr ? n * mine.slot_bytes : 0;
  char* base = static_cast<char*>(
      comm.heap().malloc(exchange > 0 ? exchange_at + exchange : before_exchange, 4096, true));
  sync_.arrivals = reinterpret_cast<uint64_t*>(base);
  sync_.tallies = reinterpret_cast<uint64_t*>(base + counters);
  sync_.seq = reinterpret_cast<uint64_t*>(base + 2 * counters);
  sync_.slots = base + 3 * counters;
  sync_.descs = reinterpret_cast<uint64_t*>(sync_.slots + slots);
  permute_.packets = reinterpret_cast<char*>(sync_.descs + 2 * n);
  permute_.bulk = permute_.packets + permute_packets;
  permute_.credits = reinterpret_cast<uint64_t*>(permute_.bulk + permute_bulk);
  permute_.sent = permute_.credits + static_cast<uint64_t>(kPermuteRegions) * n;
  permute_.got = permute_.sent + static_cast<uint64_t>(kPermuteRegions) * n;
  permute_.arrived = permute_.got + static_cast<uint64_t>(kPermuteRegions) * n;
  permute_flags_.ready = permute_.arrived + static_cast<uint64_t>(kPermuteRegions) * n;
  permute_flags_.arrived = permute_flags_.ready + n;
  if (exchange > 0) exchange_slots_ = {base + exchange_at, mine.slot_bytes};
  permute_.packet_bytes = kPermuteSlotBytes;
  permute_.n_pes = static_cast<int32_t>(n);
  sync_.slot_bytes = mine.slot_bytes;
  sync_.ctas = static_cast<int32_t>(mine.ctas);
  sync_.n_pes = static_cast<int32_t>(n);
  check_ = mine.check != 0;

  cuda::DeviceGuard guard(comm.device());
  kernels::preload();
}

}  // namespace gshmem::coll
