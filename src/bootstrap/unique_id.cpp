#include "bootstrap/unique_id.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "common/env.h"
#include "common/error.h"
#include "common/hash.h"

namespace gshmem {
namespace {

constexpr char kMagic[8] = {'G', 'S', 'H', 'M', 'E', 'M', 'I', 'D'};
constexpr uint32_t kVersion = 1;

// Wire layout inside gshmem_unique_id_t (all integers little-endian as on x86/ARM hosts; the
// address and port in network order).
struct Wire {
  char magic[8];
  uint32_t version;
  uint32_t addr;
  uint16_t port;
  uint8_t reserved[6];
  uint8_t secret[kSecretBytes];
};
static_assert(sizeof(Wire) <= GSHMEM_UNIQUE_ID_BYTES);

// Listeners opened by create(listen=true), keyed by secret tag, until a rank-0 comm adopts one.
std::mutex listeners_mutex;
std::map<std::string, int>& listeners() {
  static std::map<std::string, int> m;
  return m;
}

// Ports drawn for a listener bound later come from [kLowestDrawnPort, the ephemeral range's
// start), as gshmem.tcp_ports draws the Python launcher's.
constexpr int kLowestDrawnPort = 15000;

// A port number for rank 0 to bind later. A port that bind(0) returned goes back to the kernel's
// ephemeral pool, where any outgoing connection on the host may take it first; below that range
// only explicit choices land. So: drawn at random below it (skipping busy ones) where there is
// room, else the kernel's choice.
uint16_t draw_port(in_addr addr) {
  int ephemeral = 0, last = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (range >> ephemeral >> last && ephemeral - kLowestDrawnPort >= 1024) {
    for (int attempt = 0; attempt < 64; ++attempt) {
      uint32_t r = 0;
      random_bytes(&r, sizeof r);
      const auto port =
          static_cast<uint16_t>(kLowestDrawnPort + r % (ephemeral - kLowestDrawnPort));
      try {
        tcp_listen(addr, port, nullptr);  // free now (closed again at once)
        return port;
      } catch (const Error&) {
      }
    }
  }
  uint16_t bound = 0;
  Fd fd = tcp_listen(addr, 0, &bound);
  return bound;
}

}  // namespace

UniqueId UniqueId::create(const std::string& address, uint16_t port, bool listen) {
  UniqueId id;
  std::string where = address.empty() ? env::bootstrap_addr() : address;
  id.addr = where.empty() ? default_ipv4() : resolve_ipv4(where);
  random_bytes(id.secret, sizeof id.secret);
  if (listen) {
    uint16_t bound = 0;
    Fd fd = tcp_listen(id.addr, port, &bound);
    id.port = bound;
    std::lock_guard<std::mutex> lock(listeners_mutex);
    listeners()[id.secret_tag()] = fd.release();
  } else if (port != 0) {
    id.port = port;
  } else {
    // A port number on paper: rank 0 binds it at init (SO_REUSEADDR). Drawn where no outgoing
    // connection takes it meanwhile; another process choosing the same one is reported clearly.
    id.port = draw_port(id.addr);
  }
  return id;
}

UniqueId UniqueId::decode(const gshmem_unique_id_t& raw) {
  Wire w;
  std::memcpy(&w, raw.bytes, sizeof w);
  if (std::memcmp(w.magic, kMagic, sizeof kMagic) != 0 || w.version != kVersion) {
    throw_error(GSHMEM_ERROR_USAGE,
                "not a gshmem unique id (bad magic or version); pass the bytes that rank 0's "
                "gshmem_unique_id_create / gshmem.UniqueId.create produced, unchanged");
  }
  UniqueId id;
  id.addr.s_addr = w.addr;
  id.port = ntohs(w.port);
  std::memcpy(id.secret, w.secret, sizeof id.secret);
  return id;
}

gshmem_unique_id_t UniqueId::encode() const {
  Wire w{};
  std::memcpy(w.magic, kMagic, sizeof kMagic);
  w.version = kVersion;
  w.addr = addr.s_addr;
  w.port = htons(port);
  std::memcpy(w.secret, secret, sizeof secret);
  gshmem_unique_id_t raw{};
  std::memcpy(raw.bytes, &w, sizeof w);
  return raw;
}

std::string UniqueId::describe() const { return ipv4_to_string(addr) + ":" + std::to_string(port); }

std::string UniqueId::secret_tag() const {
  uint64_t h = hash_bytes(secret, sizeof secret, 0x6773686d656d6964ull);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Fd take_listener(const UniqueId& id) {
  std::lock_guard<std::mutex> lock(listeners_mutex);
  auto it = listeners().find(id.secret_tag());
  if (it == listeners().end()) return Fd();
  Fd fd(it->second);
  listeners().erase(it);
  return fd;
}

}  // namespace gshmem
