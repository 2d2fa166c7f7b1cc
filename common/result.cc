#include "common/result.h"

#include <cstring>

namespace fedfs {

std::string Error::ToString() const {
  std::string s = context;
  if (!s.empty()) s += ": ";
  s += std::strerror(code);
  return s;
}

}  // namespace fedfs
