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
  const bool came = g_posted.wait_for(lock, std::chrono::duration<double>(seconds), [&] {
    found = g_posts.find(key);
    return found != g_posts.end();
  });
  if (!came) return false;
  *out = found->second;
  g_posts.erase(found);
  return true;
}

}  // namespace gshmem::jax
