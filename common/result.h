// Result types shared by every module.
//
// errno is the currency: FUSE answers with errno, so a failure carries the
// real errno chosen where it happened plus a short human context for logs.
// Remote failures map to errno as documented in docs/errors.md.
// Exceptions never cross a module boundary; functions return Result<T>.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <utility>

namespace fedfs {

struct Error {
  int code = EIO;       // a positive errno value
  std::string context;  // what failed, for logs and CLI messages

  // "context: strerror(code)".
  std::string ToString() const;
};

template <class T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

// Builds the error side of a Result: `return Err(ENOENT, "no such peer");`.
inline std::unexpected<Error> Err(int code, std::string context) {
  return std::unexpected<Error>(Error{code, std::move(context)});
}
inline std::unexpected<Error> Err(Error e) { return std::unexpected<Error>(std::move(e)); }

inline Status Ok() { return {}; }

}  // namespace fedfs
