#include "stream/validate.h"

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/comm.h"
#include "gshmem/gshmem.h"

namespace gshmem::stream {
namespace {

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string unreachable(const char* op, int pe, int me) {
  return std::string(op) + ": PE " + std::to_string(pe) + " is not load/store-reachable from PE " +
         std::to_string(me) +
         " (another host, or P2P turned off by GSHMEM_DISABLE_P2P=1) and this comm has no proxy "
         "path (UCX could not be loaded, or GSHMEM_TRANSPORT=p2p): see docs/network.md";
}

void require_pe(Comm& comm, const char* op, int pe) {
  const int n = comm.nranks();
  GSHMEM_REQUIRE(pe >= 0 && pe < n, std::string(op) + ": pe " + std::to_string(pe) +
                                        " is out of range; the comm has PEs 0.." +
                                        std::to_string(n - 1));
}

}  // namespace

void require_symmetric(Comm& comm, const char* op, const char* name, const void* p, size_t bytes) {
  SymmetricHeap& heap = comm.heap();
  const uint64_t base = reinterpret_cast<uint64_t>(heap.base());
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  const uint64_t mapped = heap.mapped();
  GSHMEM_REQUIRE(heap.contains(p),
                 std::string(op) + ": " + name + " (" + hex(addr) +
                     ") is not in this comm's symmetric heap [" + hex(base) + ", " +
                     hex(base + mapped) +
                     "); pass memory from gshmem_malloc/calloc (comm.empty/zeros/malloc in "
                     "Python) on this comm, named by its local address");
  const uint64_t room = mapped - (addr - base);
  GSHMEM_REQUIRE(bytes <= room, std::string(op) + ": " + name + " + " + std::to_string(bytes) +
                                    " bytes runs " + std::to_string(bytes - room) +
                                    " bytes past the end of the symmetric heap (" +
                                    hex(base + mapped) +
                                    "); pass fewer bytes or a larger allocation");
}

void require_local(const char* op, const char* name, const void* p) {
  GSHMEM_REQUIRE(p != nullptr, std::string(op) + ": " + name +
                                   " is NULL; pass device memory of this comm's GPU");
}

void require_reachable(Comm& comm, const char* op, int pe) {
  require_pe(comm, op, pe);
  GSHMEM_REQUIRE(comm.heap().local_index()[pe] >= 0 || comm.via_proxy(pe),
                 unreachable(op, pe, comm.rank()));
}

void require_signal(Comm& comm, const char* op, const uint64_t* sig) {
  require_symmetric(comm, op, "sig", sig, sizeof(uint64_t));
  GSHMEM_REQUIRE(reinterpret_cast<uint64_t>(sig) % sizeof(uint64_t) == 0,
                 std::string(op) + ": sig (" + hex(reinterpret_cast<uint64_t>(sig)) +
                     ") is not 8-byte aligned; a signal is one aligned uint64 word");
}

void require_signal_op(const char* op, int signal_op) {
  GSHMEM_REQUIRE(signal_op == GSHMEM_SIGNAL_SET || signal_op == GSHMEM_SIGNAL_ADD,
                 std::string(op) + ": op " + std::to_string(signal_op) +
                     " is not a signal operation; use GSHMEM_SIGNAL_SET (0) or "
                     "GSHMEM_SIGNAL_ADD (1)");
}

void require_cmp(const char* op, int cmp, uint64_t value) {
  GSHMEM_REQUIRE(cmp >= GSHMEM_CMP_EQ && cmp <= GSHMEM_CMP_LE,
                 std::string(op) + ": cmp " + std::to_string(cmp) +
                     " is not a comparison; use GSHMEM_CMP_EQ, NE, GT, GE, LT or LE (0..5)");
  GSHMEM_REQUIRE(!(cmp == GSHMEM_CMP_GT && value == UINT64_MAX),
                 std::string(op) + ": GT UINT64_MAX can never hold: the wait would never end");
  GSHMEM_REQUIRE(!(cmp == GSHMEM_CMP_LT && value == 0),
                 std::string(op) + ": LT 0 can never hold (signals are unsigned): the wait "
                                   "would never end");
}

void require_all_reachable(Comm& comm, const char* op) {
  for (int pe = 0; pe < comm.nranks(); ++pe) require_reachable(comm, op, pe);
}

}  // namespace gshmem::stream
