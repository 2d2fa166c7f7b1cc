// The errno rule: what the caller of a mount sees for a FedFS Error
// (docs/errors.md, "The rule at the mount"). Every part returns the errno
// of what happened where it happened (the system call's on the file's
// node, the transport's for a message, its own for a refusal); on the way
// to the caller that code is changed in this one place only, by the FUSE
// frontend for every failed request.
#pragma once

#include "common/result.h"

namespace fedfs {

// `code` if it is an errno (positive), else EIO: a failure never reads as
// success or as garbage. The transport applies it to the errno a handler
// fails with before it goes on the wire; CallerErrno applies it too.
constexpr int AsErrno(int code) { return code > 0 ? code : EIO; }

// Whether `code` says that a node cannot be reached or the connection to
// it is gone: EHOSTDOWN (known dead, or the connection could not be made),
// ECONNREFUSED (nothing listens), ECONNRESET (the connection broke with the
// operation in flight), ESHUTDOWN (this node's transport or service is
// stopping), EHOSTUNREACH (no route), ENOTCONN (not connected, or a file
// service that forgot this node's session twice in a row).
bool IsUnreachable(int code);

// The errno the caller of the mount gets for `e`:
//   IsUnreachable(e.code) -> EHOSTDOWN: the node cannot be reached; which
//                            way the transport found out is the log's business;
//   e.code <= 0           -> EIO (AsErrno): not an errno (a bug), never success;
//   anything else         -> e.code as it is. ETIMEDOUT in particular stays:
//                            the node may only be slow, and the operation
//                            may have happened there.
int CallerErrno(const Error& e);

}  // namespace fedfs
