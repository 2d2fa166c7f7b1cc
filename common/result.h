// Result types shared by every module.
//
// errno is the currency: FUSE answers with errno, so a failure carries the
// real errno chosen where it happened plus a short human context for logs.
// What the caller of a mount gets for an Error: common/errors.h; every errno
// FedFS returns, per part: docs/errors.md.
// Exceptions never cross a module boundary; functions return Result<T>.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <type_traits>
#include <utility>

namespace fedfs {

struct Error {
  int code = EIO;       // a positive errno value
  std::string context;  // what failed, for logs and CLI messages

  // "context: strerror(code)".
  std::string ToString() const;
};

// std::expected<T, Error> that may not be dropped: a call whose Result is
// ignored does not compile (-Werror). Where ignoring is right (best-effort
// cleanup, an error already reported elsewhere), say so at the call with
// `.IgnoreError();` and a comment why.
template <class T>
class [[nodiscard]] Result : public std::expected<T, Error> {
 public:
  using Base = std::expected<T, Error>;
  using Base::Base;
  using Base::operator=;
  constexpr Result() = default;
  constexpr Result(const Base& b)
    requires std::is_copy_constructible_v<Base>
      : Base(b) {}
  constexpr Result(Base&& b) : Base(std::move(b)) {}

  // Drops the result on purpose (the reason goes in a comment at the call).
  constexpr void IgnoreError() const noexcept {}
};
using Status = Result<void>;

// Builds the error side of a Result: `return Err(ENOENT, "no such peer");`.
inline std::unexpected<Error> Err(int code, std::string context) {
  return std::unexpected<Error>(Error{code, std::move(context)});
}
inline std::unexpected<Error> Err(Error e) { return std::unexpected<Error>(std::move(e)); }

inline Status Ok() { return {}; }

}  // namespace fedfs
