#include "common/error.h"

#include <cerrno>
#include <cstring>

namespace gshmem {

void throw_error(gshmem_result_t code, const std::string& what) { throw Error(code, what); }

void throw_errno(const std::string& what) {
  int err = errno;
  throw Error(GSHMEM_ERROR_SYSTEM, what + ": " + std::strerror(err));
}

}  // namespace gshmem
