// gshmem._C, collectives part: binds the collectives-on-a-stream section of the C ABI
// (gshmem_*_on_stream collectives) for python/gshmem/comm.py, which maps torch dtypes and
// operator names to the enums below and tensors, teams and streams to raw values (errors and
// the comm behind a CommHandle: ext_common.h). `team` is None (every PE) or the tuple
// (start, stride, size, my_pe) of a gshmem_team_t.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "gshmem/gshmem.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;
using gshmem::python::call;
using gshmem::python::comm_of;

namespace {

using TeamTuple = std::tuple<int, int, int, int>;  // (start, stride, size, my_pe)

// Holds the gshmem_team_t that the C call points at (nullptr for None).
struct TeamArg {
  explicit TeamArg(const std::optional<TeamTuple>& t) {
    if (t) {
      team = {std::get<0>(*t), std::get<1>(*t), std::get<2>(*t), std::get<3>(*t)};
      ptr = &team;
    }
  }
  TeamArg(const TeamArg&) = delete;  // ptr points into this object
  TeamArg& operator=(const TeamArg&) = delete;
  gshmem_team_t team{};
  const gshmem_team_t* ptr = nullptr;
};

template <typename T = void>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

gshmem_dtype_t dtype_of(int v) { return static_cast<gshmem_dtype_t>(v); }
gshmem_redop_t redop_of(int v) { return static_cast<gshmem_redop_t>(v); }

}  // namespace

void bind_coll(nb::module_& m) {
  nb::dict dtypes;
  dtypes["float32"] = static_cast<int>(GSHMEM_FLOAT32);
  dtypes["bfloat16"] = static_cast<int>(GSHMEM_BFLOAT16);
  dtypes["float16"] = static_cast<int>(GSHMEM_FLOAT16);
  dtypes["int32"] = static_cast<int>(GSHMEM_INT32);
  dtypes["int64"] = static_cast<int>(GSHMEM_INT64);
  m.attr("COLL_DTYPES") = dtypes;
  nb::dict redops;
  redops["sum"] = static_cast<int>(GSHMEM_SUM);
  redops["prod"] = static_cast<int>(GSHMEM_PROD);
  redops["min"] = static_cast<int>(GSHMEM_MIN);
  redops["max"] = static_cast<int>(GSHMEM_MAX);
  m.attr("COLL_REDOPS") = redops;

  m.def("all_reduce_on_stream", [](nb::handle comm, std::optional<TeamTuple> team, uintptr_t in,
                                    uintptr_t out, size_t count, int dtype, int op,
                                    uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        TeamArg t(team);
        call([&] {
          return gshmem_all_reduce_on_stream(c, t.ptr, ptr(in), ptr(out), count, dtype_of(dtype),
                                             redop_of(op), ptr(stream));
        });
      }, "comm"_a, "team"_a.none(), "in_"_a, "out"_a, "count"_a, "dtype"_a, "op"_a, "stream"_a);
  m.def("all_gather_on_stream", [](nb::handle comm, std::optional<TeamTuple> team, uintptr_t in,
                                    uintptr_t out, size_t count, int dtype, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        TeamArg t(team);
        call([&] {
          return gshmem_all_gather_on_stream(c, t.ptr, ptr(in), ptr(out), count, dtype_of(dtype),
                                             ptr(stream));
        });
      }, "comm"_a, "team"_a.none(), "in_"_a, "out"_a, "count"_a, "dtype"_a, "stream"_a);
  m.def("reduce_scatter_on_stream", [](nb::handle comm, std::optional<TeamTuple> team,
                                        uintptr_t in, uintptr_t out, size_t count, int dtype,
                                        int op, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        TeamArg t(team);
        call([&] {
          return gshmem_reduce_scatter_on_stream(c, t.ptr, ptr(in), ptr(out), count,
                                                 dtype_of(dtype), redop_of(op), ptr(stream));
        });
      }, "comm"_a, "team"_a.none(), "in_"_a, "out"_a, "count"_a, "dtype"_a, "op"_a, "stream"_a);
  m.def("broadcast_on_stream", [](nb::handle comm, std::optional<TeamTuple> team, uintptr_t in,
                                   uintptr_t out, size_t count, int dtype, int root,
                                   uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        TeamArg t(team);
        call([&] {
          return gshmem_broadcast_on_stream(c, t.ptr, ptr(in), ptr(out), count, dtype_of(dtype),
                                            root, ptr(stream));
        });
      }, "comm"_a, "team"_a.none(), "in_"_a, "out"_a, "count"_a, "dtype"_a, "root"_a, "stream"_a);
  m.def("all_to_all_on_stream", [](nb::handle comm, std::optional<TeamTuple> team, uintptr_t in,
                                    uintptr_t out, size_t count, int dtype, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        TeamArg t(team);
        call([&] {
          return gshmem_all_to_all_on_stream(c, t.ptr, ptr(in), ptr(out), count, dtype_of(dtype),
                                             ptr(stream));
        });
      }, "comm"_a, "team"_a.none(), "in_"_a, "out"_a, "count"_a, "dtype"_a, "stream"_a);
  m.def("all_to_allv_on_stream", [](nb::handle comm, std::optional<TeamTuple> team, uintptr_t in,
                                     const std::vector<size_t>& send_counts,
                                     const std::vector<size_t>& send_displs, uintptr_t out,
                                     const std::vector<size_t>& recv_counts,
                                     const std::vector<size_t>& recv_displs, int dtype,
                                     uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        TeamArg t(team);
        const size_t n = send_counts.size();
        if (send_displs.size() != n || recv_counts.size() != n || recv_displs.size() != n) {
          gshmem::python::raise(GSHMEM_ERROR_USAGE,
                                "all_to_allv_on_stream: send_counts, send_displs, recv_counts "
                                "and recv_displs must have the same length (the team size)");
        }
        call([&] {
          return gshmem_all_to_allv_on_stream(c, t.ptr, ptr(in), send_counts.data(),
                                              send_displs.data(), ptr(out), recv_counts.data(),
                                              recv_displs.data(), dtype_of(dtype), ptr(stream));
        });
      }, "comm"_a, "team"_a.none(), "in_"_a, "send_counts"_a, "send_displs"_a, "out"_a,
      "recv_counts"_a, "recv_displs"_a, "dtype"_a, "stream"_a);
  m.def("permute_on_stream", [](nb::handle comm, uintptr_t in, uintptr_t out, size_t bytes,
                                int dst_pe, int src_pe, uintptr_t stream) {
        gshmem_comm_t c = comm_of(comm);
        call([&] {
          return gshmem_permute_on_stream(c, ptr(in), ptr(out), bytes, dst_pe, src_pe,
                                          ptr(stream));
        });
      }, "comm"_a, "in_"_a, "out"_a, "bytes"_a, "dst_pe"_a, "src_pe"_a, "stream"_a);
}
