// Backend and algorithm choice for the collectives (select.h; docs/collectives.md "Backend
// choice"). Pure: the same Query gives the same Choice on every PE, with no GPU and no
// communication. The environment is re-read at each call (a handful of getenv calls), so tests
// and users may change it between calls; every PE of a job must see the same values.
#include "coll/select.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/env.h"
#include "common/error.h"

namespace gshmem::coll {
namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;
constexpr size_t kNever = 0;                       // a *_MAX of 0: the algorithm is never chosen
constexpr size_t kNoLimit = static_cast<size_t>(-1);  // a NCCL_MIN of "never"

// ---------------------------------------------------------------------------------------------
// Default thresholds, in bytes of input per PE, for a team of kAnchorPes PEs.
//
// MEASURED on nvidia-h200-x4 (4 x H200, NV18 through NVSwitch, NVLink multicast off, bf16, CUDA
// graph), 2026-11-21, with the commands in docs/collectives.md ("Measuring the thresholds"):
//   packet vs one-shot (both forced): packet takes 4.4-6.0 us where one-shot takes 8.7-10.7 us,
//     for all_reduce up to 64 KiB per PE (at 128 KiB: 10.7 vs 10.6 us), and for all_gather /
//     reduce_scatter / all_to_all at every size measured (up to 64 KiB per member: one packet
//     slot per launch). Remeasured 2026-11-28 with every packet collective on the permute's
//     slots (bench coll --np 4, forced, sizes as nccl-tests'): all_reduce packets 4.3-5.7 us to
//     32 KiB against one-shot's 6.8-7.1, 8.0 against 7.4 at 128 KiB; all_gather 5.9 against 8.0
//     at 32 KiB per PE, 8.1 against 8.6 at 128 KiB; reduce_scatter and all_to_all 5.8 / 6.1
//     against 7.4 / 8.5 at 128 KiB of input, 8.0 / 8.4 against 7.7 / 7.6 at 512 KiB.
//   one-shot vs two-shot all_reduce: one-shot up to 256 KiB (11.7 us), two-shot above (the
//     two-shot pulling symmetric inputs; pushed ones: kPushedOneShotMax).
//   gshmem (forced) vs NCCL, same run: all_reduce 1.15x at 8 MiB, 0.93x at 16 MiB; all_gather
//     1.04x at 64 MiB per PE (the largest measured); reduce_scatter 1.13x at 16 MiB of input,
//     0.93x at 32 MiB; all_to_all 1.09x at 256 MiB of input (the largest measured). NCCL's
//     threshold sits at the last size gshmem won.
//   The same with ordinary (non-symmetric) buffers, which stage the output through heap scratch
//     (bench coll --buffers device, gshmem forced, same run as NCCL): all_reduce 0.80x at 512 KiB,
//     1.08x at 2 MiB, 1.02x at 8 MiB, 0.80x at 32 MiB; all_gather 1.51x at 2 MiB per PE, 1.03x
//     at 8 MiB, 0.85x at 32 MiB; reduce_scatter 1.25x at 8 MiB of input, 0.92x at 32 MiB;
//     all_to_all 1.09x at 32 MiB of input, 0.84x at 128 MiB. Staged all_reduce goes to NCCL
//     above one-shot's range: its 2-8% gains between 2 and 8 MiB do not cover the 0.80x at 512
//     KiB (the rule has one threshold; measured before pushed calls kept one-shot to 512 KiB,
//     kPushedOneShotMax, not since).
//   broadcast, all_to_allv, barrier: always gshmem (XLA's rule: point-to-point permutes stay on
//     the one-sided path; NCCL has no all-to-all-v or barrier in this backend).
// ---------------------------------------------------------------------------------------------
constexpr int kAnchorPes = 4;

// Below kAnchorPes, all_reduce's one-shot range: this much one-shot traffic per PE, so 1 MiB at
// 2 PEs and 512 KiB at 3. MEASURED on nvidia-h200-x2 (2 x H200), 2026-11-27, all_reduce forced
// one_shot against the pulled two-shot, three runs: 1 MiB 11.3-11.5 us against 12.3-12.5,
// 2 MiB 15.7-15.9 against 15.1-15.3 (512 KiB 9.3-9.8 against 11.1-11.5). 3 PEs: not measured.
constexpr size_t kSmallTeamOneShotTraffic = 1 * MiB;

// Below kAnchorPes, all_reduce's packet range: this much packet traffic per PE, so 256 KiB (one
// permute chunk, kernels.h: reduce_packets) at 2 PEs and 128 KiB at 3. MEASURED on
// nvidia-h200-x2 (2 x H200), 2026-11-28, two PEs of one process, CUDA graphs of 200 calls
// (benchmarks/graph_chain.py), packets against one-shot (both forced): 64 KiB 3.5 against
// 6.0 us, 256 KiB 4.7 against 6.5, 512 KiB (two chunks) 9.2 against 7.2. 3 PEs: not measured.
constexpr size_t kSmallTeamPacketTraffic = 256 * KiB;

// The per-PE traffic that op's `suffix` range grows to hold below kAnchorPes; 0: it does not.
size_t small_team_traffic(gshmem_coll_t op, const std::string& suffix) {
  if (suffix == "ONE_SHOT_MAX") return kSmallTeamOneShotTraffic;
  if (suffix == "PACKET_MAX" && op == GSHMEM_COLL_ALL_REDUCE) return kSmallTeamPacketTraffic;
  return 0;
}

// NCCL's all_reduce threshold when the two-shot pulls symmetric inputs (pull_path): one launch
// at any size, no staging. MEASURED on nvidia-h200-x2 (2 x H200), 2026-11-27, gshmem forced, same
// run as NCCL: 1.32x at 16 MiB, 1.16x at 32 MiB, 1.09x at 64 MiB (pushed: 0.99x at 16 MiB, 0.75x
// at 64 MiB); on nvidia-h200-x4 (4 x H200), the same way: 1.08x at 16 MiB, 1.09x at 32 MiB,
// 1.00x at 64 MiB.
constexpr size_t kPullNcclMin = 64 * MiB;

// all_reduce's one-shot range when the two-shot would push its inputs (pull_path false: an input
// or output not symmetric, as every gshmem.jax psum), at kAnchorPes; the table's one_shot_max is
// for pulled calls. MEASURED on nvidia-h200-x4 (4 x H200), 2026-11-28, bench coll --np 4, forced,
// ordinary buffers: one-shot 11.1 us at 512 KiB against the pushed two-shot's 14.4, 16.5 against
// 16.1 at 1 MiB (symmetric buffers, pulled: one-shot 8.6 / 10.9 us at 256 / 512 KiB against
// 8.9 / 9.7).
constexpr size_t kPushedOneShotMax = 512 * KiB;

struct Defaults {
  gshmem_coll_t op;
  size_t packet_max;    // packet when bytes <= this
  size_t one_shot_max;  // one_shot when bytes <= this (else the op's large algorithm); for
                        // all_reduce when pulled (else kPushedOneShotMax)
  size_t nccl_min;      // NCCL (when enabled) when bytes > this; kNoLimit: never by default
  size_t nccl_min_staged;  // the same for calls that stage their output (direct_path() false)
  Algo large;           // gshmem's algorithm above one_shot_max
  bool nccl_capable;    // the NCCL backend implements this op
  std::vector<Algo> algos;  // gshmem algorithms GSHMEM_COLL_<OP>_ALGO may name
};

const std::vector<Defaults>& table() {
  // clang-format off: one row per collective, its columns aligned
  static const std::vector<Defaults> t = {
      // op                        packet_max one_shot   nccl_min   (staged)   large          nccl
      {GSHMEM_COLL_ALL_REDUCE,     64 * KiB,  256 * KiB, 8 * MiB,   256 * KiB, Algo::TwoShot, true,
       {Algo::Packet, Algo::OneShot, Algo::TwoShot}},
      {GSHMEM_COLL_ALL_GATHER,     64 * KiB,  kNoLimit,  64 * MiB,  8 * MiB,   Algo::OneShot, true,
       {Algo::Packet, Algo::OneShot, Algo::Exchange}},
      {GSHMEM_COLL_REDUCE_SCATTER, 256 * KiB, kNoLimit,  16 * MiB,  16 * MiB,  Algo::OneShot, true,
       {Algo::Packet, Algo::OneShot}},
      {GSHMEM_COLL_BROADCAST,      kNever,    kNoLimit,  kNoLimit,  kNoLimit,  Algo::OneShot, true,
       {Algo::OneShot, Algo::Exchange}},
      {GSHMEM_COLL_ALL_TO_ALL,     256 * KiB, kNoLimit,  256 * MiB, 32 * MiB,  Algo::OneShot, true,
       {Algo::Packet, Algo::OneShot, Algo::Exchange}},
      {GSHMEM_COLL_ALL_TO_ALLV,    kNever,    kNoLimit,  kNoLimit,  kNoLimit,  Algo::OneShot, false,
       {Algo::OneShot}},
      {GSHMEM_COLL_BARRIER,        kNever,    kNoLimit,  kNoLimit,  kNoLimit,  Algo::OneShot, false,
       {Algo::OneShot}},
  };
  // clang-format on
  return t;
}

const Defaults& defaults_for(gshmem_coll_t op) {
  for (const auto& d : table()) {
    if (d.op == op) return d;
  }
  throw_error(GSHMEM_ERROR_USAGE, "unknown collective " + std::to_string(static_cast<int>(op)) +
                                      " (one of GSHMEM_COLL_ALL_REDUCE .. GSHMEM_COLL_BARRIER)");
}

std::string upper(const char* s) {
  std::string u(s);
  for (auto& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* getenv_nonempty(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return (v && *v) ? v : nullptr;
}

std::string var(gshmem_coll_t op, const char* suffix) {
  return "GSHMEM_COLL_" + upper(name(op)) + "_" + suffix;
}

std::string size_text(size_t bytes) {
  if (bytes == kNoLimit) return "unlimited";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  size_t v = bytes;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + " " + units[u];
}

enum class Want { Auto, Gshmem, Nccl };

// auto|gshmem|nccl, or a usage error naming the variable.
Want parse_backend(const std::string& variable, const char* value) {
  std::string v = lower(value);
  if (v == "auto") return Want::Auto;
  if (v == "gshmem") return Want::Gshmem;
  if (v == "nccl") return Want::Nccl;
  throw_error(GSHMEM_ERROR_USAGE, variable + "='" + value +
                                      "' is not a collective backend; use auto, gshmem or nccl");
}

std::string algo_list(const std::vector<Algo>& algos) {
  std::string s;
  for (size_t i = 0; i < algos.size(); ++i) {
    if (i) s += i + 1 == algos.size() ? " or " : ", ";
    s += name(algos[i]);
  }
  return s;
}

Algo parse_algo(const std::string& variable, const char* value, const Defaults& d) {
  std::string v = lower(value);
  std::replace(v.begin(), v.end(), '-', '_');
  for (Algo a : d.algos) {
    if (v == name(a)) return a;
  }
  throw_error(GSHMEM_ERROR_USAGE, variable + "='" + value + "' is not an algorithm of " +
                                      name(d.op) + "; use " + algo_list(d.algos) +
                                      " (or set " + var(d.op, "BACKEND") + "=nccl for NCCL)");
}

// A threshold: the variable's size when set, else the default scaled for the PE count.
struct Threshold {
  size_t bytes;
  bool from_env;
};

Threshold threshold(gshmem_coll_t op, const char* suffix, size_t fallback, bool scale, int npes) {
  std::string name_ = var(op, suffix);
  if (const char* v = getenv_nonempty(name_)) {
    std::string s = lower(v);
    if (s == "never" || s == "none") return {suffix[0] == 'N' ? kNoLimit : kNever, true};
    return {static_cast<size_t>(env::parse_size(v, name_.c_str())), true};
  }
  // One-sided one-shot traffic per PE grows with the peers ((n-1) x bytes): beyond the anchors'
  // 4 PEs, shrink the packet and one-shot ranges in proportion. Below them the one-shot range,
  // and all_reduce's packet range, grow to hold at least small_team_traffic() per PE (the other
  // packet ranges are not grown: unmeasured). Rounded down to whole KiB.
  const size_t small = small_team_traffic(op, suffix);
  const bool grow = npes < kAnchorPes && small != 0;
  if (scale && npes > 1 && (npes > kAnchorPes || grow) && fallback != kNever &&
      fallback != kNoLimit) {
    fallback = grow ? std::max(fallback, small / static_cast<size_t>(npes - 1))
                    : fallback * (kAnchorPes - 1) / static_cast<size_t>(npes - 1);
    fallback = std::max<size_t>(KiB, fallback / KiB * KiB);  // whole KiB, at least 1 KiB
  }
  return {fallback, false};
}

std::string nccl_missing(const std::string& who) {
  return who + " asks for NCCL, but NCCL is not enabled on this comm: call "
               "gshmem_comm_enable_nccl (Python: comm.enable_nccl()) on every PE first; NCCL "
               "runs collectives over the world team only";
}

void log_once(const Query& q, const Choice& c) {
  if (!env::debug()) return;
  static std::mutex mu;
  static std::set<std::tuple<int, int, int, int, bool, std::string>> seen;
  // Log each distinct decision once (per op, PE count, backend, algorithm and rule), not every
  // call: collectives run thousands of times per second.
  std::string rule = c.reason.substr(0, c.reason.find(" ("));
  auto key = std::make_tuple(static_cast<int>(q.op), q.npes, static_cast<int>(c.backend),
                             static_cast<int>(c.algo), q.nccl_available, rule);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (seen.size() > 4096 || !seen.insert(key).second) return;
  }
  std::fprintf(stderr, "gshmem[coll] %s %zu B on %d PEs: %s %s (%s)\n", name(q.op), q.bytes,
               q.npes, c.backend == Backend::Nccl ? "nccl" : "gshmem", name(c.algo),
               c.reason.c_str());
}

bool moves_bytes(gshmem_coll_t op) {
  return op == GSHMEM_COLL_ALL_GATHER || op == GSHMEM_COLL_BROADCAST ||
         op == GSHMEM_COLL_ALL_TO_ALL;
}

// Whether Algo::Exchange can run a call beyond reach: an operation that only moves bytes, into a
// symmetric `out` (not `in`, for all_to_all: Query::out_symmetric says so); or a reduction, which
// stages through the slots a comm with a proxy path has (any `out`).
bool exchange_capable(const Query& q) {
  const bool reduces = q.op == GSHMEM_COLL_ALL_REDUCE || q.op == GSHMEM_COLL_REDUCE_SCATTER;
  return (moves_bytes(q.op) && q.out_symmetric) || (reduces && q.proxy);
}

// Algo::Exchange asked for by name: only into a symmetric `out`.
void require_exchange_out(const Query& q, const std::string& who) {
  if (q.out_symmetric) return;
  throw_error(GSHMEM_ERROR_USAGE, who + ": the exchange stores straight into every member's "
                                        "out, so it needs a symmetric out (comm.empty), other "
                                        "than in");
}

// decide() for a team with a member beyond load/store reach. `want`/`who`: the backend override;
// `algo`: the algorithm override ("VAR=value") or empty, `algo_is_exchange` whether it names it.
Choice beyond_reach(const Query& q, const Defaults& d, Want want, const std::string& who,
                    const std::string& algo, bool algo_is_exchange) {
  const std::string what = std::string(name(q.op)) + ": a member of the team is beyond "
                           "load/store reach (another host, or P2P turned off)";
  if (algo_is_exchange && q.proxy) {
    require_exchange_out(q, algo);
    return {Backend::Gshmem, Algo::Exchange, algo};
  }
  if (!algo.empty()) {
    throw_error(GSHMEM_ERROR_USAGE, what + ", where gshmem's kernels do not reach; unset " + algo);
  }
  const bool nccl = d.nccl_capable && q.nccl_available && want != Want::Gshmem;
  if (nccl) {
    return {Backend::Nccl, Algo::Nccl, "a member beyond load/store reach: NCCL's network path"};
  }
  if (want == Want::Nccl) throw_error(GSHMEM_ERROR_USAGE, nccl_missing(who));
  if (q.proxy && exchange_capable(q)) {
    return {Backend::Gshmem, Algo::Exchange,
            (want == Want::Gshmem ? who + ": " : std::string()) +
                "a member beyond load/store reach: puts through the proxy" +
                (moves_bytes(q.op) ? " into the symmetric out" : ", reduced here")};
  }
  std::string how;
  if (!q.proxy) {
    how = "this comm has no proxy path (docs/network.md)";
  } else if (moves_bytes(q.op)) {
    how = "through the proxy it needs a symmetric out (comm.empty), other than in";
  } else {
    how = "gshmem has no " + std::string(name(q.op)) + " through the proxy yet";
  }
  if (!d.nccl_capable) throw_error(GSHMEM_ERROR_USAGE, what + "; " + how + ", and NCCL has none");
  if (want == Want::Gshmem) {
    throw_error(GSHMEM_ERROR_USAGE, what + "; " + how + ": unset " + who + " so that NCCL runs it");
  }
  throw_error(GSHMEM_ERROR_USAGE,
              what + "; " + how + ", or NCCL: call gshmem_comm_enable_nccl (Python: "
                     "comm.enable_nccl()) on every PE first, and run it over the world team");
}

Choice decide(const Query& q) {
  const Defaults& d = defaults_for(q.op);
  GSHMEM_REQUIRE(q.npes >= 1, std::string(name(q.op)) + ": the team must have at least 1 PE, got " +
                                  std::to_string(q.npes));

  // 1. Backend overrides: the per-operation variable, else the global one.
  std::string op_var = var(q.op, "BACKEND");
  Want want = Want::Auto;
  std::string who;
  if (const char* v = getenv_nonempty(op_var)) {
    want = parse_backend(op_var, v);
    who = op_var + "=" + v;
    if (want == Want::Nccl && !d.nccl_capable) {
      throw_error(GSHMEM_ERROR_USAGE, who + ": the NCCL backend has no " + name(q.op) +
                                          "; use auto or gshmem");
    }
  } else if (const char* g = getenv_nonempty("GSHMEM_COLL_BACKEND")) {
    want = parse_backend("GSHMEM_COLL_BACKEND", g);
    who = std::string("GSHMEM_COLL_BACKEND=") + g;
    // The global NCCL setting applies to what NCCL can do; the rest stays one-sided.
    if (want == Want::Nccl && !d.nccl_capable) {
      want = Want::Gshmem;
      who += " (NCCL has no " + std::string(name(q.op)) + ", so gshmem)";
    }
  }

  // 2. Algorithm override: implies gshmem; contradicts a per-operation nccl.
  std::string algo_var = var(q.op, "ALGO");
  const char* algo_value = getenv_nonempty(algo_var);

  // Members beyond load/store reach: NCCL, or puts through the proxy, whatever the size.
  std::optional<Algo> asked;
  if (algo_value) asked = parse_algo(algo_var, algo_value, d);
  const std::string algo_who = algo_value ? algo_var + "=" + algo_value : "";
  if (q.beyond_reach) {
    return beyond_reach(q, d, want, who, algo_who, asked == Algo::Exchange);
  }
  if (asked) {
    if (want == Want::Nccl && getenv_nonempty(op_var)) {
      throw_error(GSHMEM_ERROR_USAGE, algo_who + " chooses a gshmem algorithm but " + who +
                                          " chooses NCCL; unset one of them");
    }
    if (*asked == Algo::Exchange) require_exchange_out(q, algo_who);
    return {Backend::Gshmem, *asked, algo_who};
  }

  if (want == Want::Nccl) {
    if (!q.nccl_available) throw_error(GSHMEM_ERROR_USAGE, nccl_missing(who));
    return {Backend::Nccl, Algo::Nccl, who};
  }

  // 3. Size rules (thresholds: per-operation variables, else the table above). All three are
  // read first so that a malformed one is an error whatever the size.
  const bool staged = !direct_path(q.op, q.bytes, q.out_symmetric);
  const bool pulled = pull_path(q.op, q.bytes, q.in_symmetric, q.out_symmetric);
  Threshold nccl = threshold(q.op, "NCCL_MIN",
                             pulled   ? kPullNcclMin
                             : staged ? d.nccl_min_staged
                                      : d.nccl_min,
                             false, q.npes);
  Threshold packet = threshold(q.op, "PACKET_MAX", d.packet_max, true, q.npes);
  const bool pushed = q.op == GSHMEM_COLL_ALL_REDUCE && !pulled;
  Threshold one =
      threshold(q.op, "ONE_SHOT_MAX", pushed ? kPushedOneShotMax : d.one_shot_max, true, q.npes);
  std::string suffix;  // what NCCL's threshold says about this call, appended to the reason
  if (want == Want::Auto && d.nccl_capable) {
    std::string at = size_text(nccl.bytes) + (nccl.from_env ? " (" + var(q.op, "NCCL_MIN") + ")"
                                              : pulled      ? " for pulled inputs"
                                              : staged      ? " for staged outputs"
                                                            : "");
    if (nccl.bytes != kNoLimit && q.bytes > nccl.bytes) {
      if (q.nccl_available) return {Backend::Nccl, Algo::Nccl, "above the NCCL threshold of " + at};
      suffix = "; above the NCCL threshold of " + at + " but NCCL is not enabled";
    } else if (nccl.bytes != kNoLimit) {
      suffix = "; at most the NCCL threshold of " + at;
    }
  }
  std::string prefix = want == Want::Gshmem ? who + ": " : std::string();
  if (q.npes == 1) return {Backend::Gshmem, Algo::OneShot, prefix + "one PE: a local copy"};
  if (q.op == GSHMEM_COLL_ALL_TO_ALLV || q.op == GSHMEM_COLL_BARRIER) {
    return {Backend::Gshmem, Algo::OneShot, prefix + "always one-sided"};
  }
  if (packet.bytes != kNever && q.bytes <= packet.bytes) {
    return {Backend::Gshmem, Algo::Packet,
            prefix + "at most the packet threshold of " + size_text(packet.bytes) +
                (packet.from_env ? " (" + var(q.op, "PACKET_MAX") + ")" : "") + suffix};
  }
  const std::string one_note = one.from_env ? " (" + var(q.op, "ONE_SHOT_MAX") + ")"
                               : pushed     ? " for pushed inputs"
                                            : "";
  if (one.bytes == kNoLimit || q.bytes <= one.bytes) {
    std::string rule = one.bytes == kNoLimit
                           ? std::string("one-sided at every size")
                           : "at most the one-shot threshold of " + size_text(one.bytes) + one_note;
    if (q.op == GSHMEM_COLL_BROADCAST) rule = "broadcast stays one-sided";
    return {Backend::Gshmem, Algo::OneShot, prefix + rule + suffix};
  }
  return {Backend::Gshmem, d.large,
          prefix + "above the one-shot threshold of " + size_text(one.bytes) + one_note + suffix};
}

// Whether `bytes` reaches the size in variable `var` (default `fallback`; "never": no size).
bool at_least(size_t bytes, const char* var, size_t fallback) {
  const char* v = getenv_nonempty(var);
  if (v == nullptr) return bytes >= fallback;
  if (lower(v) == "never") return false;
  return bytes >= static_cast<size_t>(env::parse_size(v, var));
}

}  // namespace

bool direct_path(gshmem_coll_t op, size_t bytes, bool out_symmetric) {
  if (!out_symmetric) return false;
  switch (op) {
    case GSHMEM_COLL_ALL_REDUCE: return true;
    case GSHMEM_COLL_ALL_GATHER:
    case GSHMEM_COLL_BROADCAST:
    case GSHMEM_COLL_ALL_TO_ALL: {
      // One more signal phase than a staged call (every member's `out` is free), so only from a
      // size where skipping the staging copy pays for it.
      return at_least(bytes, "GSHMEM_COLL_DIRECT_MIN", 256 * KiB);
    }
    default: return false;
  }
}

bool pull_path(gshmem_coll_t op, size_t bytes, bool in_symmetric, bool out_symmetric) {
  return op == GSHMEM_COLL_ALL_REDUCE && in_symmetric && out_symmetric &&
         at_least(bytes, "GSHMEM_COLL_PULL_MIN", 0);
}

PermutePath permute_path(size_t bytes, bool out_symmetric, bool in_place, bool proxy) {
  // The defaults: 4 x H200, each path forced (docs/collectives.md): packets 6.7 /
  // 10.2 us at 256 / 512 KiB against bulk 9.6 / 9.0; bulk 42.3 / 80.8 us at 8 / 16 MiB against
  // the copy engine 46.6 / 70.3.
  if (out_symmetric && !in_place &&
      (proxy || at_least(bytes, "GSHMEM_PERMUTE_COPY_MIN", 16 * MiB))) {
    return PermutePath::CopyEngine;
  }
  return at_least(bytes, "GSHMEM_PERMUTE_BULK_MIN", 512 * KiB) ? PermutePath::Bulk
                                                               : PermutePath::Packets;
}

const char* name(PermutePath path) {
  switch (path) {
    case PermutePath::Packets: return "packets";
    case PermutePath::Bulk: return "bulk";
    case PermutePath::CopyEngine: return "copy_engine";
  }
  return "?";
}

// Sets c.pull where the chosen two-shot all_reduce reads the inputs in place.
static void mark_pull(const Query& q, Choice& c) {
  c.pull = c.backend == Backend::Gshmem && c.algo == Algo::TwoShot &&
           pull_path(q.op, q.bytes, q.in_symmetric, q.out_symmetric);
}

Choice choose(const Query& q) {
  Choice c = decide(q);
  // Only two-shot all_reduce and one-shot all_gather / broadcast / all_to_all have direct paths.
  const Algo with_direct = q.op == GSHMEM_COLL_ALL_REDUCE ? Algo::TwoShot : Algo::OneShot;
  c.direct = c.backend == Backend::Gshmem && c.algo == with_direct &&
             direct_path(q.op, q.bytes, q.out_symmetric);
  mark_pull(q, c);
  log_once(q, c);
  return c;
}

std::string explain(const Query& q) {
  Choice c = decide(q);
  mark_pull(q, c);
  std::string s = std::string(name(q.op)) + " " + std::to_string(q.bytes) + " B on " +
                  std::to_string(q.npes) + (q.npes == 1 ? " PE: " : " PEs: ") +
                  (c.backend == Backend::Nccl ? "nccl" : "gshmem");
  if (c.backend == Backend::Gshmem) s += " " + algo_name(c);
  return s + " (" + c.reason + ")";
}

std::string algo_name(const Choice& c) {
  return std::string(name(c.algo)) + (c.pull ? " pull" : "");
}

const char* name(gshmem_coll_t op) {
  switch (op) {
    case GSHMEM_COLL_ALL_REDUCE: return "all_reduce";
    case GSHMEM_COLL_ALL_GATHER: return "all_gather";
    case GSHMEM_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case GSHMEM_COLL_BROADCAST: return "broadcast";
    case GSHMEM_COLL_ALL_TO_ALL: return "all_to_all";
    case GSHMEM_COLL_ALL_TO_ALLV: return "all_to_allv";
    case GSHMEM_COLL_BARRIER: return "barrier";
  }
  return "unknown";
}

const char* name(Algo algo) {
  switch (algo) {
    case Algo::Packet: return "packet";
    case Algo::OneShot: return "one_shot";
    case Algo::TwoShot: return "two_shot";
    case Algo::Nccl: return "nccl";
    case Algo::Exchange: return "exchange";
  }
  return "unknown";
}

}  // namespace gshmem::coll
