// Point-to-point synchronisation on this PE's own symmetric variables (OpenSHMEM wait_until and
// test families): a peer updates the variable (p, atomic, signal_op, put_signal); the waiter reads
// it with ld.acquire.sys, so when the comparison holds, every write the peer made before a
// release update (signal_op, put_signal, or a strong store after fence) is visible.
//
// T is any 2-, 4- or 8-byte type with the comparison operators (int, unsigned, long long,
// uint64_t, ...). `status` (may be nullptr) excludes element i when status[i] != 0, as in
// OpenSHMEM. The wait_until* calls block; the test* calls do not.
//
// Each wait has two forms. The one that takes a Device first is bounded (deadline.cuh): it gives
// up after GSHMEM_TIMEOUT, on comm.abort() or once another wait of the comm failed, records the
// fault for the host, and reports it (false, SIZE_MAX, 0) to every thread of the scope. The
// OpenSHMEM form without a Device spins until the comparison holds, however long that takes: use
// it only where no Device is at hand.
#pragma once

#include "deadline.cuh"
#include "ptx.cuh"
#include "scope.cuh"

namespace gshmem {

// Non-blocking: whether `*ivar <cmp> value` holds now.
template <class T>
__device__ inline bool test(const T* ivar, Cmp cmp, T value) {
  return detail::compare(detail::load_acquire(ivar), cmp, value);
}

// Blocks until `*ivar <cmp> value`. Scoped: thread 0 waits, then the scope synchronises.
template <class Scope = Thread, class T>
__device__ inline void wait_until(const T* ivar, Cmp cmp, T value) {
  if (Scope::rank() == 0) {
    while (!test(ivar, cmp, value)) {
    }
  }
  Scope::sync();
}

// Bounded: blocks until `*ivar <cmp> value` and returns true, or gives up and returns false (the
// same for every thread of the scope). `from_pe` names the PE expected to write, for the record.
template <class Scope = Thread, class T>
__device__ inline bool wait_until(const Device& dev, const T* ivar, Cmp cmp, T value,
                                  int from_pe = -1) {
  bool done = true;
  if (Scope::rank() == 0) {
    const detail::Waited what{GSHMEM_WAIT_VALUE, from_pe, static_cast<int>(cmp), ivar,
                              detail::fault_bits(value)};
    Deadline deadline;
    T seen;
    while (!detail::compare(seen = detail::load_acquire(ivar), cmp, value)) {
      if (deadline.expired(dev, what, detail::fault_bits(seen))) {
        done = false;
        break;
      }
    }
  }
  return Scope::broadcast(done);
}

// Non-blocking: whether every non-excluded element satisfies the comparison.
template <class T>
__device__ inline bool test_all(const T* ivars, size_t nelems, const int* status, Cmp cmp,
                                T value) {
  for (size_t i = 0; i < nelems; ++i) {
    if ((status == nullptr || status[i] == 0) && !test(ivars + i, cmp, value)) return false;
  }
  return true;
}

// Non-blocking: the index of a non-excluded element that satisfies the comparison, or
// SIZE_MAX ((size_t)-1) when none does.
template <class T>
__device__ inline size_t test_any(const T* ivars, size_t nelems, const int* status, Cmp cmp,
                                  T value) {
  for (size_t i = 0; i < nelems; ++i) {
    if ((status == nullptr || status[i] == 0) && test(ivars + i, cmp, value)) return i;
  }
  return static_cast<size_t>(-1);
}

// Non-blocking: writes the indices of every non-excluded element that satisfies the comparison
// to `indices` (room for nelems) and returns how many there are.
template <class T>
__device__ inline size_t test_some(const T* ivars, size_t nelems, size_t* indices,
                                   const int* status, Cmp cmp, T value) {
  size_t found = 0;
  for (size_t i = 0; i < nelems; ++i) {
    if ((status == nullptr || status[i] == 0) && test(ivars + i, cmp, value)) indices[found++] = i;
  }
  return found;
}

// Blocks until every non-excluded element satisfies the comparison. Scoped: the threads split
// the elements, then the scope synchronises.
template <class Scope = Thread, class T>
__device__ inline void wait_until_all(const T* ivars, size_t nelems, const int* status, Cmp cmp,
                                      T value) {
  for (size_t i = Scope::rank(); i < nelems; i += Scope::size()) {
    if (status == nullptr || status[i] == 0) {
      while (!test(ivars + i, cmp, value)) {
      }
    }
  }
  Scope::sync();
}

// Bounded: as above; true when every element got there, false when a thread gave up.
template <class Scope = Thread, class T>
__device__ inline bool wait_until_all(const Device& dev, const T* ivars, size_t nelems,
                                      const int* status, Cmp cmp, T value) {
  bool done = true;
  for (size_t i = Scope::rank(); i < nelems && done; i += Scope::size()) {
    if (status != nullptr && status[i] != 0) continue;
    const detail::Waited what{GSHMEM_WAIT_VALUE, -1, static_cast<int>(cmp), ivars + i,
                              detail::fault_bits(value)};
    Deadline deadline;
    T seen;
    while (done && !detail::compare(seen = detail::load_acquire(ivars + i), cmp, value)) {
      done = !deadline.expired(dev, what, detail::fault_bits(seen));
    }
  }
  return Scope::all(done);
}

// Blocks until some non-excluded element satisfies the comparison and returns its index;
// returns SIZE_MAX at once when every element is excluded (or nelems == 0).
template <class T>
__device__ inline size_t wait_until_any(const T* ivars, size_t nelems, const int* status, Cmp cmp,
                                        T value) {
  bool any_included = false;
  for (size_t i = 0; i < nelems; ++i) any_included |= status == nullptr || status[i] == 0;
  if (!any_included) return static_cast<size_t>(-1);
  size_t found;
  while ((found = test_any(ivars, nelems, status, cmp, value)) == static_cast<size_t>(-1)) {
  }
  return found;
}

// Blocks until at least one non-excluded element satisfies the comparison, then returns
// test_some's result (0 at once when every element is excluded).
template <class T>
__device__ inline size_t wait_until_some(const T* ivars, size_t nelems, size_t* indices,
                                         const int* status, Cmp cmp, T value) {
  if (wait_until_any(ivars, nelems, status, cmp, value) == static_cast<size_t>(-1)) return 0;
  return test_some(ivars, nelems, indices, status, cmp, value);
}

// Bounded: as above; SIZE_MAX also when the wait gave up. Made by one thread.
template <class T>
__device__ inline size_t wait_until_any(const Device& dev, const T* ivars, size_t nelems,
                                        const int* status, Cmp cmp, T value) {
  bool any_included = false;
  for (size_t i = 0; i < nelems; ++i) any_included |= status == nullptr || status[i] == 0;
  if (!any_included) return static_cast<size_t>(-1);
  const detail::Waited what{GSHMEM_WAIT_VALUE, -1, static_cast<int>(cmp), ivars,
                            detail::fault_bits(value)};
  Deadline deadline;
  size_t found;
  while ((found = test_any(ivars, nelems, status, cmp, value)) == static_cast<size_t>(-1)) {
    if (deadline.expired(dev, what, detail::fault_bits(detail::load_relaxed(ivars)))) break;
  }
  return found;
}

// Bounded: as above; 0 also when the wait gave up. Made by one thread.
template <class T>
__device__ inline size_t wait_until_some(const Device& dev, const T* ivars, size_t nelems,
                                         size_t* indices, const int* status, Cmp cmp, T value) {
  if (wait_until_any(dev, ivars, nelems, status, cmp, value) == static_cast<size_t>(-1)) return 0;
  return test_some(ivars, nelems, indices, status, cmp, value);
}

}  // namespace gshmem
