#include "common/env.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace gshmem::env {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

bool get_bool(const char* name, bool fallback) {
  const char* v = get(name);
  if (!v) return fallback;
  const std::string s = lower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw_error(GSHMEM_ERROR_USAGE, std::string(name) + "='" + v + "' is not a boolean; use 0 or 1");
}

uint64_t get_size(const char* name, uint64_t fallback) {
  const char* v = get(name);
  return v ? parse_size(v, name) : fallback;
}

uint64_t positive_size(const char* name, uint64_t fallback) {
  const uint64_t n = get_size(name, fallback);
  if (n == 0) throw_error(GSHMEM_ERROR_USAGE, std::string(name) + "=0: needs at least 1 byte");
  return n;
}

}  // namespace

uint64_t parse_size(const std::string& text, const char* what) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  std::string unit(end ? end : "");
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  else scale = -1;
  if (end == text.c_str() || scale < 0 || !(value >= 0) || !std::isfinite(value)) {
    throw_error(GSHMEM_ERROR_USAGE,
                std::string(what) + "='" + text +
                    "' is not a size; write bytes or a number with K, M, G or T");
  }
  return static_cast<uint64_t>(value * scale);
}

double timeout_seconds() {
  const char* v = get("GSHMEM_TIMEOUT");
  if (!v) return 120.0;
  char* end = nullptr;
  double t = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(t > 0)) {
    throw_error(GSHMEM_ERROR_USAGE,
                std::string("GSHMEM_TIMEOUT='") + v + "' is not a positive number of seconds");
  }
  return t;
}

bool watchdog() { return get_bool("GSHMEM_WATCHDOG", true); }
bool check_alloc() { return get_bool("GSHMEM_CHECK_ALLOC", true); }
bool disable_p2p() { return get_bool("GSHMEM_DISABLE_P2P", false); }
bool proxy_staging() { return get_bool("GSHMEM_PROXY_STAGING", false); }
bool proxy_local_shm() { return get_bool("GSHMEM_PROXY_LOCAL_SHM", true); }

uint64_t proxy_bulk_min(uint64_t fallback) {
  return positive_size("GSHMEM_PROXY_BULK_MIN", fallback);
}
uint64_t proxy_part(uint64_t fallback) { return positive_size("GSHMEM_PROXY_PART", fallback); }
bool debug() { return get_bool("GSHMEM_DEBUG", false); }
uint64_t heap_reserve(uint64_t fallback) { return get_size("GSHMEM_HEAP_RESERVE", fallback); }
uint64_t heap_initial() { return get_size("GSHMEM_HEAP_INITIAL", 64ull << 20); }
uint64_t heap_grow() { return get_size("GSHMEM_HEAP_GROW", 256ull << 20); }

Transport transport() {
  const char* v = get("GSHMEM_TRANSPORT");
  if (!v) return Transport::kAuto;
  const std::string s = lower(v);
  if (s == "auto") return Transport::kAuto;
  if (s == "p2p") return Transport::kP2p;
  if (s == "proxy") return Transport::kProxy;
  throw_error(GSHMEM_ERROR_USAGE,
              std::string("GSHMEM_TRANSPORT='") + v +
                  "' is not a transport; use auto, p2p or proxy");
}

uint64_t proxy_queue() {
  const uint64_t n = get_size("GSHMEM_PROXY_QUEUE", 1024);
  if (n < 2 || (n & (n - 1)) != 0) {
    throw_error(GSHMEM_ERROR_USAGE, "GSHMEM_PROXY_QUEUE=" + std::to_string(n) +
                                        " must be a power of two >= 2 (descriptors)");
  }
  return n;
}

std::string bootstrap_addr() {
  const char* v = get("GSHMEM_BOOTSTRAP_ADDR");
  return v ? std::string(v) : std::string();
}

}  // namespace gshmem::env
