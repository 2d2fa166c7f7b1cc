// Stable hashing for anything that picks an owner (ring positions, path
// managers). Fixed algorithm (xxHash64) and fixed seed, identical on every
// node and every build; never std::hash. Thread-safe, no state.
#pragma once

#include <cstdint>
#include <string_view>

namespace fedfs {

inline constexpr uint64_t kRingSeed = 0x46656446534b6579ULL;  // "FedFSKey"

uint64_t StableHash(std::string_view data, uint64_t seed = kRingSeed);

}  // namespace fedfs
