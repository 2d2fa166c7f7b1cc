// Sizes in bytes as people write them: an integer, or one with a unit (K, M,
// G, T, with or without "iB": powers of 1024), e.g. 268435456, 256M, 256MiB.
// The config (fedfsd/config.cc) and fedfsctl's options read them alike.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace fedfs {

// EINVAL (what was expected, in the context) for anything else: no digits,
// more than 15 of them, an unknown unit.
Result<uint64_t> ParseByteSize(std::string_view s);

}  // namespace fedfs
