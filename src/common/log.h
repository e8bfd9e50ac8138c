// Debug log to stderr, on when GSHMEM_DEBUG=1. Lines start with "gshmem[rank]".
#pragma once

#include <cstdio>
#include <string>

#include "common/env.h"

namespace gshmem {

template <typename... Args>
void log_debug(int rank, const char* fmt, Args... args) {
  if (!env::debug()) return;
  std::string line = "gshmem[" + std::to_string(rank) + "] " + fmt + "\n";
  std::fprintf(stderr, line.c_str(), args...);
}

}  // namespace gshmem
