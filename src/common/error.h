// Errors inside the host runtime: one exception type carrying a gshmem_result_t code.
// The C ABI layer (src/capi.cpp) turns it into a return code plus gshmem_last_error().
#pragma once

#include <stdexcept>
#include <string>

#include "gshmem/gshmem.h"

namespace gshmem {

class Error : public std::runtime_error {
 public:
  Error(gshmem_result_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  gshmem_result_t code() const { return code_; }

 private:
  gshmem_result_t code_;
};

[[noreturn]] void throw_error(gshmem_result_t code, const std::string& what);
// Appends strerror(errno) to the message and throws GSHMEM_ERROR_SYSTEM.
[[noreturn]] void throw_errno(const std::string& what);

#define GSHMEM_REQUIRE(cond, msg)                                     \
  do {                                                                \
    if (!(cond)) ::gshmem::throw_error(GSHMEM_ERROR_USAGE, (msg));    \
  } while (0)

}  // namespace gshmem
