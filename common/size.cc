#include "common/size.h"

#include <cctype>
#include <string>

namespace fedfs {

Result<uint64_t> ParseByteSize(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits])) != 0) ++digits;
  std::string_view unit = s.substr(digits);
  if (unit.ends_with("iB")) unit.remove_suffix(2);
  constexpr std::string_view kUnits[] = {"", "K", "M", "G", "T"};
  int shift = -1;
  for (int i = 0; i < 5; ++i) {
    if (unit == kUnits[i]) shift = 10 * i;
  }
  if (digits == 0 || digits > 15 || shift < 0) {
    return Err(EINVAL, "expected a size such as 268435456 or 256MiB, got \"" + std::string(s) + "\"");
  }
  const uint64_t v = std::stoull(std::string(s.substr(0, digits)));
  if (v > (UINT64_MAX >> shift)) return Err(EINVAL, "\"" + std::string(s) + "\" is too large");
  return v << shift;
}

}  // namespace fedfs
