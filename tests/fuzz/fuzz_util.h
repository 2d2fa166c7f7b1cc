// Shared by the libFuzzer targets of tests/fuzz (docs/fuzzing.md).
//
// FUZZ_CHECK(cond): an invariant of the decoder under test; a violation
// prints the condition and aborts, which libFuzzer reports as a crash (and
// saves the input).
//
// Seeds: every target answers `<target> --write-seeds DIR` (looked at in
// LLVMFuzzerInitialize, before libFuzzer reads its flags) by writing a few
// small valid inputs, made with the project's own encoders, into DIR and
// exiting; scripts/fuzz.sh --write-seeds runs that for tests/fuzz/corpus/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

namespace fedfs::fuzz {

// Collects the seeds of one target.
class Seeds {
 public:
  void Add(std::string name, std::span<const std::byte> bytes) {
    seeds_.emplace_back(std::move(name), std::string(reinterpret_cast<const char*>(bytes.data()),
                                                     bytes.size()));
  }
  void Add(std::string name, std::string_view text) {
    seeds_.emplace_back(std::move(name), std::string(text));
  }
  // `prefix` bytes, then `bytes` (targets whose first bytes choose a mode).
  void Add(std::string name, std::string_view prefix, std::span<const std::byte> bytes) {
    std::string s(prefix);
    s.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    seeds_.emplace_back(std::move(name), std::move(s));
  }
  const std::vector<std::pair<std::string, std::string>>& all() const { return seeds_; }

 private:
  std::vector<std::pair<std::string, std::string>> seeds_;
};

// If argv holds "--write-seeds DIR": writes what `make` adds into DIR (one
// file per seed, named as added) and exits 0 (1 on a write error).
inline void MaybeWriteSeeds(int argc, char** argv, const std::function<void(Seeds&)>& make) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--write-seeds") != 0) continue;
    const std::filesystem::path dir = argv[i + 1];
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    Seeds s;
    make(s);
    for (const auto& [name, bytes] : s.all()) {
      std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
        std::exit(1);
      }
    }
    std::printf("%zu seeds written to %s\n", s.all().size(), dir.c_str());
    std::exit(0);
  }
}

// Reads a little-endian integer from the front of `data` (0 past its end)
// and drops those bytes.
template <class T>
T Take(const uint8_t*& data, size_t& size) {
  T v = 0;
  const size_t n = std::min(sizeof(T), size);
  for (size_t i = 0; i < n; ++i) v |= static_cast<T>(static_cast<T>(data[i]) << (8 * i));
  data += n;
  size -= n;
  return v;
}

inline std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

}  // namespace fedfs::fuzz
