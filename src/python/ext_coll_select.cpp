// gshmem._C, backend-choice part: binds gshmem_comm_enable_nccl and gshmem_coll_explain for
// python/gshmem/coll_select.py, plus internal entry points for the CPU tests: the pure selectors
// (coll_choose / coll_explain_query, permute_path, permute_plan) and the NCCL loader on its own
// (nccl_probe).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <vector>

#include "coll/nccl.h"
#include "coll/permute_plan.h"
#include "coll/select.h"
#include "gshmem/gshmem.h"
#include "python/ext_common.h"

namespace nb = nanobind;
using namespace nb::literals;
using gshmem::python::call;
using gshmem::python::call_internal;
using gshmem::python::comm_of;

namespace {

gshmem::coll::Query query(int op, size_t bytes, int npes, bool nccl_available,
                          bool out_symmetric, bool beyond_reach, bool proxy, bool in_symmetric) {
  return {static_cast<gshmem_coll_t>(op), bytes, npes, nccl_available, out_symmetric,
          in_symmetric, beyond_reach, proxy};
}

const char* step_name(gshmem::coll::PermuteStep step) {
  static const char* const names[] = {"copy", "zero", "announce", "await_ready", "send",
                                      "await_arrival"};
  return names[static_cast<int>(step)];
}

}  // namespace

void bind_coll_select(nb::module_& m) {
  nb::dict ops;
  for (int op = GSHMEM_COLL_ALL_REDUCE; op <= GSHMEM_COLL_BARRIER; ++op) {
    ops[gshmem::coll::name(static_cast<gshmem_coll_t>(op))] = op;
  }
  m.attr("COLL_SELECT_OPS") = ops;

  m.def(
      "comm_enable_nccl",
      [](nb::handle comm) {
        gshmem_comm_t c = comm_of(comm);
        call([&] { return gshmem_comm_enable_nccl(c); });
      },
      "comm"_a, "Collective: loads NCCL and creates its communicator (gshmem_comm_enable_nccl).");
  m.def("comm_coll_explain", [](nb::handle comm, int op, size_t bytes, int npes,
                                bool out_symmetric, bool in_symmetric) {
        gshmem_comm_t c = comm_of(comm);
        char buf[512];
        call([&] {
          return gshmem_coll_explain(c, static_cast<gshmem_coll_t>(op), bytes, npes,
                                     (out_symmetric ? GSHMEM_EXPLAIN_OUT_SYMMETRIC : 0) |
                                         (in_symmetric ? GSHMEM_EXPLAIN_IN_SYMMETRIC : 0),
                                     buf, sizeof buf);
        });
        return std::string(buf);
      }, "comm"_a, "op"_a, "bytes"_a, "npes"_a, "out_symmetric"_a, "in_symmetric"_a = false);
  m.def("coll_choose", [](int op, size_t bytes, int npes, bool nccl_available, bool out_symmetric,
                          bool beyond_reach, bool proxy, bool in_symmetric) {
        auto c = call_internal([&] {
          return gshmem::coll::choose(query(op, bytes, npes, nccl_available, out_symmetric,
                                            beyond_reach, proxy, in_symmetric));
        });
        return std::make_tuple(
            std::string(c.backend == gshmem::coll::Backend::Nccl ? "nccl" : "gshmem"),
            gshmem::coll::algo_name(c), c.reason);
      }, "op"_a, "bytes"_a, "npes"_a, "nccl_available"_a, "out_symmetric"_a = false,
      "beyond_reach"_a = false, "proxy"_a = false, "in_symmetric"_a = false,
      "(backend, algo, reason) the selector picks; pure (no comm, no GPU). Tests only.");
  m.def("coll_explain_query", [](int op, size_t bytes, int npes, bool nccl_available,
                                 bool out_symmetric, bool beyond_reach, bool proxy,
                                 bool in_symmetric) {
        return call_internal([&] {
          return gshmem::coll::explain(query(op, bytes, npes, nccl_available, out_symmetric,
                                             beyond_reach, proxy, in_symmetric));
        });
      }, "op"_a, "bytes"_a, "npes"_a, "nccl_available"_a, "out_symmetric"_a = false,
      "beyond_reach"_a = false, "proxy"_a = false, "in_symmetric"_a = false);
  m.def("permute_path", [](size_t bytes, bool out_symmetric, bool in_place, bool proxy) {
        return std::string(gshmem::coll::name(call_internal([&] {
          return gshmem::coll::permute_path(bytes, out_symmetric, in_place, proxy);
        })));
      }, "bytes"_a, "out_symmetric"_a, "in_place"_a = false, "proxy"_a = false,
      "'copy_engine', 'bulk' or 'packets': the path gshmem_permute_on_stream takes; pure; tests.");
  m.def(
      "permute_plan",
      [](int me, int dst_pe, int src_pe) {
        std::vector<std::tuple<std::string, int>> out;
        for (const auto& a : gshmem::coll::permute_plan(me, dst_pe, src_pe)) {
          out.emplace_back(step_name(a.step), a.pe);
        }
        return out;
      },
      "me"_a, "dst_pe"_a, "src_pe"_a,
      "[(step, pe)]: the copy-engine permute's steps on one PE (permute_plan.h); pure; tests.");
  m.def("exchange_plan", [](const std::vector<int>& dsts, const std::vector<int>& srcs) {
        std::vector<std::tuple<std::string, int>> out;
        for (const auto& a : gshmem::coll::exchange_plan(dsts, srcs)) {
          out.emplace_back(step_name(a.step), a.pe);
        }
        return out;
      }, "dsts"_a, "srcs"_a,
      "[(step, pe)]: an exchange's steps on one PE (permute_plan.h); pure. Tests only.");
  m.def("nccl_probe", [](const std::string& library) {
        auto p = call_internal([&] { return gshmem::coll::probe_nccl(library); });
        return std::make_tuple(p.ok, p.ok ? p.path : p.why, p.version);
      }, "library"_a = "",
      "(ok, path or why, version): loads and checks libnccl in this process only. Tests only.");
}
