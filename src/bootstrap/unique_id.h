// UniqueId: where rank 0's bootstrap listens, plus a 128-bit secret that every connection must
// present. It is plain bytes (gshmem_unique_id_t) so any channel can carry it.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "bootstrap/socket.h"
#include "gshmem/gshmem.h"

namespace gshmem {

constexpr size_t kSecretBytes = 16;

struct UniqueId {
  in_addr addr{};
  uint16_t port = 0;
  uint8_t secret[kSecretBytes] = {};

  // address "" means GSHMEM_BOOTSTRAP_ADDR, else this host's first non-loopback IPv4 address.
  static UniqueId create(const std::string& address, uint16_t port, bool listen);
  static UniqueId decode(const gshmem_unique_id_t& raw);  // validates; throws a usage error
  gshmem_unique_id_t encode() const;
  std::string describe() const;  // "addr:port"
  std::string secret_tag() const;  // a hash of the secret (safe to show or use in names)
};

// The rendezvous socket opened by UniqueId::create(listen=true) in this process, handed over to
// the rank-0 comm that uses the id. Returns an invalid Fd if this process opened none for it.
Fd take_listener(const UniqueId& id);

}  // namespace gshmem
