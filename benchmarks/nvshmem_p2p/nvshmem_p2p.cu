// NVSHMEM point-to-point measurements, the baseline of `python -m gshmem.bench p2p --compare
// nvshmem`. Two processes (one per GPU) started by the bench (or by hand), bootstrapped with
// NVSHMEM's unique-id ("UID") method: rank 0 writes the id to --uid-file, rank 1 reads it. No MPI,
// no nvshmrun. Rank 0 prints one "&&&& PERF" line per measurement (python/gshmem/bench/report.py
// parses them); both print "nvshmem_p2p: ..." lines on errors and exit non-zero.
//
//   nvshmem_p2p --rank R --nranks 2 --uid-file F [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
//               [-w WARMUP] [--repeats R] [--configs 8x1024,32x1024] [--scopes thread,warp,block]
//               [--dirs uni,bidir] [--lat-sizes 8,1024] [--lat-iters N] [--onstream 0|1]
//
// Measured like the gshmem side: device-side barrier before each timed region, CUDA events, the
// median of --repeats, rotating slots when a size fits in L2, iterations raised for small sizes so
// each timed region moves at least 256 MiB; bandwidth = bytes moved by one PE / time (GB = 1e9).
// Keep NVSHMEM_DISABLE_NVLS=1 in the environment (the bench sets it).
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#define CHECK_CUDA(x)                                                                     \
  do {                                                                                    \
    cudaError_t err_ = (x);                                                               \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "nvshmem_p2p: %s failed: %s (line %d)\n", #x,                  \
                   cudaGetErrorString(err_), __LINE__);                                   \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

typedef unsigned long long u64;
constexpr u64 kRotateBytes = 256ull << 20;  // rotate slots until this many bytes (> 4 x L2)
constexpr u64 kMaxSlots = 256;
constexpr u64 kMinBytesPerRepeat = 256ull << 20;
constexpr int kMaxItersPerRepeat = 10000;

enum Scope { kThread = 0, kWarp = 1, kBlock = 2 };
const char* kScopeNames[] = {"thread", "warp", "block"};

struct Options {
  int rank = -1, nranks = 2;
  std::string uid_file;
  u64 min_size = 1 << 20, max_size = 256ull << 20, factor = 2;
  int iters = 20, warmup = 5, repeats = 5, lat_iters = 1000, onstream = 1;
  std::vector<std::pair<int, int>> configs = {{8, 1024}, {32, 1024}};
  std::vector<int> scopes = {kBlock};
  std::vector<int> dirs = {0, 1};  // 0 uni, 1 bidir
  std::vector<u64> lat_sizes = {8, 1024};
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "nvshmem_p2p: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

u64 parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  u64 mult = 1;
  if (end && *end) {
    switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: die("bad size '" + s + "'");
    }
  }
  if (!(v > 0)) die("bad size '" + s + "'");
  return static_cast<u64>(v * mult);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--rank") o.rank = std::atoi(next().c_str());
    else if (a == "--nranks") o.nranks = std::atoi(next().c_str());
    else if (a == "--uid-file") o.uid_file = next();
    else if (a == "-b") o.min_size = parse_size(next());
    else if (a == "-e") o.max_size = parse_size(next());
    else if (a == "-f") o.factor = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "-n") o.iters = std::atoi(next().c_str());
    else if (a == "-w") o.warmup = std::atoi(next().c_str());
    else if (a == "--repeats") o.repeats = std::atoi(next().c_str());
    else if (a == "--lat-iters") o.lat_iters = std::atoi(next().c_str());
    else if (a == "--onstream") o.onstream = std::atoi(next().c_str());
    else if (a == "--configs") {
      o.configs.clear();
      for (auto& c : split(next(), ',')) {
        auto parts = split(c, 'x');
        if (parts.size() != 2) die("bad config '" + c + "' (want CTASxTHREADS)");
        o.configs.push_back({std::atoi(parts[0].c_str()), std::atoi(parts[1].c_str())});
      }
    } else if (a == "--scopes") {
      o.scopes.clear();
      for (auto& s : split(next(), ',')) {
        if (s == "thread") o.scopes.push_back(kThread);
        else if (s == "warp") o.scopes.push_back(kWarp);
        else if (s == "block") o.scopes.push_back(kBlock);
        else die("bad scope '" + s + "'");
      }
    } else if (a == "--dirs") {
      o.dirs.clear();
      for (auto& s : split(next(), ',')) o.dirs.push_back(s == "bidir" ? 1 : 0);
    } else if (a == "--lat-sizes") {
      o.lat_sizes.clear();
      for (auto& s : split(next(), ',')) o.lat_sizes.push_back(parse_size(s));
    } else {
      die("unknown option " + a);
    }
  }
  if (o.rank < 0 || o.uid_file.empty()) die("give --rank and --uid-file");
  if (o.factor < 2) die("-f must be at least 2");
  if (o.repeats < 1 || o.iters < 1 || o.warmup < 0) die("bad -n/-w/--repeats");
  return o;
}

u64 nslots(u64 size) {
  u64 n = (kRotateBytes + size - 1) / size;
  return std::max<u64>(1, std::min(kMaxSlots, n));
}

int iters_for(u64 size, int iters) {
  u64 want = (kMinBytesPerRepeat + size - 1) / size;
  want = std::min<u64>(want, kMaxItersPerRepeat);
  return std::max<int>(iters, static_cast<int>(want));
}

__device__ u64 global_time_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __host__ inline unsigned char pattern(u64 i, int pe) {
  u64 x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<u64>(pe) << 56);
  x ^= x >> 29;
  return static_cast<unsigned char>(x * 0xBF58476D1CE4E5B9ull >> 56);
}

__global__ void fill(unsigned char* p, u64 n, int pe) {
  for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<u64>(gridDim.x) * blockDim.x)
    p[i] = pattern(i, pe);
}

__global__ void count_mismatch(const unsigned char* p, u64 n, int pe, u64* bad) {
  u64 mine = 0;
  for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<u64>(gridDim.x) * blockDim.x)
    mine += p[i] != pattern(i, pe);
  if (mine) atomicAdd(bad, mine);
}

template <int S>
__device__ inline void xfer(void* dst, const void* src, size_t n, int pe, int get) {
  if (S == kThread) {
    if (get) nvshmem_getmem(dst, src, n, pe); else nvshmem_putmem(dst, src, n, pe);
  } else if (S == kWarp) {
    if (get) nvshmemx_getmem_warp(dst, src, n, pe); else nvshmemx_putmem_warp(dst, src, n, pe);
  } else {
    if (get) nvshmemx_getmem_block(dst, src, n, pe); else nvshmemx_putmem_block(dst, src, n, pe);
  }
}

template <int S>
__global__ void bw_kernel(char* dst, const char* src, u64 bytes, u64 stride, int slots, int iters,
                          int pe, int get) {
  const unsigned usize = S == kThread ? 1 : (S == kWarp ? 32 : blockDim.x);
  const u64 units = static_cast<u64>(gridDim.x) * (blockDim.x / usize);
  const u64 u = static_cast<u64>(blockIdx.x) * (blockDim.x / usize) + threadIdx.x / usize;
  u64 per = (bytes + units - 1) / units;
  per = (per + 15) & ~static_cast<u64>(15);
  const u64 b = per * u < bytes ? per * u : bytes;
  const u64 e = b + per < bytes ? b + per : bytes;
  for (int i = 0; i < iters; ++i) {
    const u64 off = static_cast<u64>(i % slots) * stride;
    xfer<S>(dst + off + b, src + off + b, e - b, pe, get);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
}

template <int S>
__global__ void pingpong_kernel(char* buf, const char* src, u64 bytes, uint64_t* sig, int warmup,
                                int iters, int peer, int initiator, u64* out_ns) {
  u64 t0 = 0;
  for (int i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) t0 = global_time_ns();
    const uint64_t v = static_cast<uint64_t>(i);
    if (!initiator) {
      if (S == kThread || threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
      if (S == kWarp) __syncwarp();
      if (S == kBlock) __syncthreads();
    }
    if (S == kThread) nvshmem_putmem_signal(buf, src, bytes, sig, v, NVSHMEM_SIGNAL_SET, peer);
    if (S == kWarp) nvshmemx_putmem_signal_warp(buf, src, bytes, sig, v, NVSHMEM_SIGNAL_SET, peer);
    if (S == kBlock) {
      nvshmemx_putmem_signal_block(buf, src, bytes, sig, v, NVSHMEM_SIGNAL_SET, peer);
    }
    if (initiator) {
      if (S == kThread || threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
      if (S == kWarp) __syncwarp();
      if (S == kBlock) __syncthreads();
    }
  }
  if (initiator && threadIdx.x == 0) out_ns[0] = global_time_ns() - t0;
}

struct Ctx {
  Options o;
  int me = 0, peer = 1, sms = 0;
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  char* src = nullptr;
  char* dst = nullptr;
  uint64_t* sig = nullptr;
  u64 cap = 0;
  u64* bad = nullptr;
  u64* out_ns = nullptr;

  void barrier() {
    nvshmemx_barrier_all_on_stream(stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void perf(const Ctx& c, const char* op, double value, const char* unit, const char* path,
          const char* scope, int ctas, int threads, int dir, u64 size, int sms) {
  if (c.me != 0) return;
  char smsbuf[16];
  if (sms < 0) std::snprintf(smsbuf, sizeof smsbuf, "?");
  else std::snprintf(smsbuf, sizeof smsbuf, "%d", sms);
  std::printf("&&&& PERF %s %.4f %s impl=nvshmem path=%s scope=%s ctas=%d threads=%d dir=%s "
              "size=%llu sms=%s\n",
              op, value, unit, path, scope, ctas, threads, dir ? "bidir" : "uni", size, smsbuf);
  std::fflush(stdout);
}

// Launches `launch(iters)` after a device barrier, `repeats` times; returns the median seconds
// (0 on PEs that only take part in the barrier).
template <class F>
double timed(Ctx& c, bool active, int iters, F launch) {
  if (active && c.o.warmup > 0) launch(c.o.warmup);
  std::vector<double> times;
  for (int r = 0; r < c.o.repeats; ++r) {
    nvshmemx_barrier_all_on_stream(c.stream);
    if (active) {
      CHECK_CUDA(cudaEventRecord(c.start, c.stream));
      launch(iters);
      CHECK_CUDA(cudaEventRecord(c.stop, c.stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(c.stream));
    CHECK_CUDA(cudaGetLastError());
    if (active) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, c.start, c.stop));
      times.push_back(ms * 1e-3);
    }
  }
  return active ? median(times) : 0.0;
}

// After a one-iteration transfer of `size` bytes: the receiving side counts wrong bytes; every
// PE learns the result (exit on a mismatch: data correctness comes first).
void validate(Ctx& c, bool receiver, int from_pe, u64 size, const char* what) {
  c.barrier();
  CHECK_CUDA(cudaMemsetAsync(c.bad, 0, sizeof(u64), c.stream));
  if (receiver) count_mismatch<<<256, 256, 0, c.stream>>>(
      reinterpret_cast<unsigned char*>(c.dst), size, from_pe, c.bad);
  u64 bad = 0;
  CHECK_CUDA(cudaMemcpyAsync(&bad, c.bad, sizeof bad, cudaMemcpyDeviceToHost, c.stream));
  CHECK_CUDA(cudaStreamSynchronize(c.stream));
  if (bad) die(std::string(what) + ": " + std::to_string(bad) + " wrong bytes at size " +
               std::to_string(size));
  c.barrier();
}

template <int S>
void run_bw_scope(Ctx& c, const std::vector<u64>& sizes) {
  for (const auto& config : c.o.configs) {
    const int ctas = config.first, threads = config.second;
    for (int dir : c.o.dirs) {
      for (int get = 0; get < 2; ++get) {
        for (u64 size : sizes) {
          const bool active = dir == 1 || c.me == 0;
          const int slots = static_cast<int>(nslots(size));
          const int iters = iters_for(size, c.o.iters);
          auto launch = [&](int n, int s) {
            bw_kernel<S><<<ctas, threads, 0, c.stream>>>(c.dst, c.src, size, size, s, n, c.peer,
                                                         get);
          };
          CHECK_CUDA(cudaMemsetAsync(c.dst, 0xA5, size, c.stream));
          c.barrier();
          if (active) launch(1, 1);
          CHECK_CUDA(cudaStreamSynchronize(c.stream));
          CHECK_CUDA(cudaGetLastError());
          // put: the peer's dst holds my src; get: my dst holds the peer's src.
          const bool receiver = get ? active : (dir == 1 || c.me == 1);
          validate(c, receiver, c.peer, size, get ? "get" : "put");
          double t = timed(c, active, iters, [&](int n) { launch(n, slots); });
          perf(c, get ? "get" : "put", t > 0 ? size * static_cast<double>(iters) / t / 1e9 : 0,
               "GB/s", "device", kScopeNames[S], ctas, threads, dir, size,
               std::min(ctas, c.sms));
        }
      }
    }
  }
}

void run_onstream(Ctx& c, const std::vector<u64>& sizes) {
  for (int dir : c.o.dirs) {
    for (int get = 0; get < 2; ++get) {
      for (u64 size : sizes) {
        const bool active = dir == 1 || c.me == 0;
        const int slots = static_cast<int>(nslots(size));
        const int iters = iters_for(size, c.o.iters);
        auto launch = [&](int n) {
          for (int i = 0; i < n; ++i) {
            const u64 off = static_cast<u64>(i % slots) * size;
            if (get) nvshmemx_getmem_on_stream(c.dst + off, c.src + off, size, c.peer, c.stream);
            else nvshmemx_putmem_on_stream(c.dst + off, c.src + off, size, c.peer, c.stream);
          }
          nvshmemx_quiet_on_stream(c.stream);
        };
        double t = timed(c, active, iters, launch);
        perf(c, get ? "get" : "put", t > 0 ? size * static_cast<double>(iters) / t / 1e9 : 0,
             "GB/s", "on_stream", "-", 0, 0, dir, size, -1);
      }
    }
  }
}

template <int S>
void run_latency_scope(Ctx& c) {
  const int threads = S == kThread ? 1 : (S == kWarp ? 32 : 256);
  for (u64 size : c.o.lat_sizes) {
    std::vector<double> times;
    for (int r = 0; r < c.o.repeats; ++r) {
      CHECK_CUDA(cudaMemsetAsync(c.sig, 0, sizeof(uint64_t), c.stream));
      c.barrier();
      pingpong_kernel<S><<<1, threads, 0, c.stream>>>(c.dst, c.src, size, c.sig, 50,
                                                      c.o.lat_iters, c.peer, c.me == 0, c.out_ns);
      CHECK_CUDA(cudaStreamSynchronize(c.stream));
      CHECK_CUDA(cudaGetLastError());
      u64 ns = 0;
      CHECK_CUDA(cudaMemcpy(&ns, c.out_ns, sizeof ns, cudaMemcpyDeviceToHost));
      times.push_back(ns * 1e-9);
    }
    validate(c, true, c.peer, size, "put_signal ping-pong");
    const double us = median(times) / (2.0 * c.o.lat_iters) * 1e6;
    perf(c, "pingpong", us, "us", "device", kScopeNames[S], 1, threads, 0, size, 1);
  }
}

void read_or_write_uid(const Options& o, nvshmemx_uniqueid_t* id) {
  if (o.rank == 0) {
    if (nvshmemx_get_uniqueid(id) != 0) die("nvshmemx_get_uniqueid failed");
    const std::string tmp = o.uid_file + ".tmp";
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(id), sizeof(*id));
    f.close();
    if (!f || std::rename(tmp.c_str(), o.uid_file.c_str()) != 0) die("cannot write " + o.uid_file);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(o.uid_file, std::ios::binary);
    if (f) {
      f.read(reinterpret_cast<char*>(id), sizeof(*id));
      if (f.gcount() == static_cast<std::streamsize>(sizeof(*id))) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  die("timed out after 120 s waiting for rank 0's unique id in " + o.uid_file);
}

}  // namespace

int main(int argc, char** argv) {
  Ctx c;
  c.o = parse(argc, argv);
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  if (ndev < c.o.nranks) die("needs " + std::to_string(c.o.nranks) + " GPUs, found " +
                             std::to_string(ndev));
  CHECK_CUDA(cudaSetDevice(c.o.rank % ndev));
  CHECK_CUDA(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, c.o.rank % ndev));

  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  read_or_write_uid(c.o, &id);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  if (nvshmemx_set_attr_uniqueid_args(c.o.rank, c.o.nranks, &id, &attr) != 0) {
    die("nvshmemx_set_attr_uniqueid_args failed");
  }
  if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) die("nvshmemx_init_attr failed");
  c.me = nvshmem_my_pe();
  c.peer = c.me ^ 1;
  if (nvshmem_n_pes() < 2) die("needs 2 PEs");

  std::vector<u64> sizes;
  for (u64 s = c.o.min_size; s <= c.o.max_size; s *= c.o.factor) sizes.push_back(s);
  for (u64 s : sizes) c.cap = std::max(c.cap, nslots(s) * s);
  for (u64 s : c.o.lat_sizes) c.cap = std::max(c.cap, s);

  CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreate(&c.start));
  CHECK_CUDA(cudaEventCreate(&c.stop));
  c.src = static_cast<char*>(nvshmem_malloc(c.cap));
  c.dst = static_cast<char*>(nvshmem_malloc(c.cap));
  c.sig = static_cast<uint64_t*>(nvshmem_malloc(sizeof(uint64_t)));
  if (!c.src || !c.dst || !c.sig) {
    die("nvshmem_malloc of " + std::to_string(c.cap) + " bytes failed (raise "
        "NVSHMEM_SYMMETRIC_SIZE)");
  }
  CHECK_CUDA(cudaMalloc(&c.bad, sizeof(u64)));
  CHECK_CUDA(cudaMalloc(&c.out_ns, sizeof(u64)));
  fill<<<1024, 256, 0, c.stream>>>(reinterpret_cast<unsigned char*>(c.src), c.cap, c.me);
  CHECK_CUDA(cudaGetLastError());
  c.barrier();
  if (c.me == 0) {
    std::printf("nvshmem_p2p: NVSHMEM %d.%d, %d PEs, %d SMs, %zu sizes\n", NVSHMEM_MAJOR_VERSION,
                NVSHMEM_MINOR_VERSION, nvshmem_n_pes(), c.sms, sizes.size());
    std::fflush(stdout);
  }

  for (int s : c.o.scopes) {
    if (s == kThread) run_bw_scope<kThread>(c, sizes);
    if (s == kWarp) run_bw_scope<kWarp>(c, sizes);
    if (s == kBlock) run_bw_scope<kBlock>(c, sizes);
  }
  if (c.o.onstream) run_onstream(c, sizes);
  for (int s : c.o.scopes) {
    if (s == kThread) run_latency_scope<kThread>(c);
    if (s == kWarp) run_latency_scope<kWarp>(c);
    if (s == kBlock) run_latency_scope<kBlock>(c);
  }

  c.barrier();
  nvshmem_free(c.sig);
  nvshmem_free(c.dst);
  nvshmem_free(c.src);
  nvshmem_finalize();
  if (c.me == 0) std::printf("nvshmem_p2p: done\n");
  return 0;
}
