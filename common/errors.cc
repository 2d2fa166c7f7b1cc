#include "common/errors.h"

namespace fedfs {

bool IsUnreachable(int code) {
  switch (code) {
    case EHOSTDOWN:
    case ECONNREFUSED:
    case ECONNRESET:
    case ESHUTDOWN:
    case EHOSTUNREACH:
    case ENOTCONN:
      return true;
    default:
      return false;
  }
}

int CallerErrno(const Error& e) {
  if (IsUnreachable(e.code)) return EHOSTDOWN;
  return AsErrno(e.code);
}

}  // namespace fedfs
