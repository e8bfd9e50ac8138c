#include "rendezvous.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace gshmem::jax {
namespace {

std::mutex g_mutex;
std::condition_variable g_posted;
std::map<CallKey, void*> g_posts;
// Per device, the calls made in its most recent runs (a few, in case runs interleave), newest
// last.
constexpr size_t kRunsKept = 16;
std::map<int, std::deque<std::pair<uint64_t, uint64_t>>> g_calls;  // ordinal -> (run, calls)

}  // namespace

uint64_t next_call(int ordinal, uint64_t run) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& runs = g_calls[ordinal];
  auto it = std::find_if(runs.begin(), runs.end(), [&](const auto& r) { return r.first == run; });
  if (it == runs.end()) {
    if (runs.size() == kRunsKept) runs.pop_front();
    it = runs.insert(runs.end(), {run, 0});
  }
  return it->second++;
}

void post(const CallKey& key, void* out) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_posts[key] = out;
  }
  g_posted.notify_all();
}

bool take(const CallKey& key, double seconds, void** out) {
  std::unique_lock<std::mutex> lock(g_mutex);
  auto found = g_posts.end();
  auto posted = [&] {
    found = g_posts.find(key);
    return found != g_posts.end();
  };
  bool came = true;
  if (seconds > 0) {
    came = g_posted.wait_for(lock, std::chrono::duration<double>(seconds), posted);
  } else {
    g_posted.wait(lock, posted);
  }
  if (!came) return false;
  *out = found->second;
  g_posts.erase(found);
  return true;
}

}  // namespace gshmem::jax

// The table's C ABI, for tests (tests/cpu/test_jax_ops.py) through ctypes.
extern "C" uint64_t gshmem_jax_next_call(int ordinal, uint64_t run) {
  return gshmem::jax::next_call(ordinal, run);
}

extern "C" void gshmem_jax_post(uint64_t run, uint64_t call, int pe, void* out) {
  gshmem::jax::post(gshmem::jax::CallKey{run, call, pe}, out);
}

extern "C" int gshmem_jax_take(uint64_t run, uint64_t call, int pe, double seconds, void** out) {
  return gshmem::jax::take(gshmem::jax::CallKey{run, call, pe}, seconds, out) ? 1 : 0;
}
