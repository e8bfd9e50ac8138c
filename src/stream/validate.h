// Argument checks shared by the on-stream operations (DESIGN.md §5): everything is checked on
// the host, cheaply (no CUDA call), before anything is enqueued. Each check throws a usage error
// that names the operation (`op`, e.g. "put_on_stream") and says what to do.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gshmem {

class Comm;

namespace stream {

// [p, p + bytes) lies in this comm's mapped symmetric heap (bytes >= 1).
void require_symmetric(Comm& comm, const char* op, const char* name, const void* p, size_t bytes);
// A non-null local pointer (bytes >= 1).
void require_local(const char* op, const char* name, const void* p);
// 0 <= pe < nranks and pe is load/store-reachable from this PE or on its proxy path.
void require_reachable(Comm& comm, const char* op, int pe);
// A symmetric, 8-byte aligned signal word.
void require_signal(Comm& comm, const char* op, const uint64_t* sig);
// GSHMEM_SIGNAL_SET or GSHMEM_SIGNAL_ADD.
void require_signal_op(const char* op, int signal_op);
// A GSHMEM_CMP_* value, and a comparison that can hold for some signal value.
void require_cmp(const char* op, int cmp, uint64_t value);
// Every PE is reachable, by load/store or the proxy path (the stream barrier's kernel).
void require_all_reachable(Comm& comm, const char* op);

}  // namespace stream
}  // namespace gshmem
