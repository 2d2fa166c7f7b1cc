// The errno rule at the mount (common/errors.h, docs/errors.md): every class
// of input and the errno the caller gets for it.
#include "common/errors.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

namespace fedfs {
namespace {

struct Case {
  int code;       // Error::code as a part returns it
  int caller;     // what CallerErrno answers
  bool unreachable;
  const char* why;
};

const Case kCases[] = {
    // The node cannot be reached, or the connection to it is gone: EHOSTDOWN.
    {EHOSTDOWN, EHOSTDOWN, true, "known dead, or the connection could not be made"},
    {ECONNREFUSED, EHOSTDOWN, true, "nothing listens"},
    {ECONNRESET, EHOSTDOWN, true, "the connection broke in flight"},
    {ESHUTDOWN, EHOSTDOWN, true, "this node's transport or service is stopping"},
    {EHOSTUNREACH, EHOSTDOWN, true, "no route"},
    {ENOTCONN, EHOSTDOWN, true, "not connected; the file session was lost twice"},
    // Not an errno: EIO.
    {0, EIO, false, "success is not an error"},
    {-1, EIO, false, "negative"},
    {-EPERM, EIO, false, "a negated errno"},
    // The deadline: stays, the operation may have happened.
    {ETIMEDOUT, ETIMEDOUT, false, "the deadline passed"},
    // Everything else as it is: the file system's answers...
    {ENOENT, ENOENT, false, "no such name"},
    {EACCES, EACCES, false, "refused, also after root squash"},
    {EPERM, EPERM, false, "not allowed"},
    {EEXIST, EEXIST, false, "exists"},
    {ENOTEMPTY, ENOTEMPTY, false, "a directory not empty on some node"},
    {ENOTDIR, ENOTDIR, false, "not a directory"},
    {EISDIR, EISDIR, false, "a directory"},
    {ENOSPC, ENOSPC, false, "the file's node or the journal is full"},
    {EXDEV, EXDEV, false, "across nodes, or out of the export root"},
    {EBUSY, EBUSY, false, "a directory operation in progress"},
    {ESTALE, ESTALE, false, "the inode or the manager moved on"},
    {EBADF, EBADF, false, "a handle of a restarted holder"},
    {EINTR, EINTR, false, "a lock wait interrupted"},
    {ENOLCK, ENOLCK, false, "a lock wait ended by the unmount"},
    {EIO, EIO, false, "an I/O error"},
    {ENOMEM, ENOMEM, false, "out of memory"},
    // ... and FedFS's own, which no remapping hides either.
    {EPROTO, EPROTO, false, "a malformed message"},
    {EMSGSIZE, EMSGSIZE, false, "a message over the limit"},
    {EAGAIN, EAGAIN, false, "a name held by another node for too long"},
    {EMFILE, EMFILE, false, "too many handles in one file session"},
    {ENOSYS, ENOSYS, false, "no handler for a method"},
    {EINVAL, EINVAL, false, "invalid"},
    {ENAMETOOLONG, ENAMETOOLONG, false, "a name over 255 bytes"},
};

TEST(CallerErrno, EveryInputClass) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(c.why) + " (code " + std::to_string(c.code) + ")");
    EXPECT_EQ(CallerErrno(Error{c.code, "ctx"}), c.caller);
    EXPECT_EQ(IsUnreachable(c.code), c.unreachable);
  }
}

TEST(CallerErrno, DependsOnTheCodeOnly) {
  EXPECT_EQ(CallerErrno(Error{ECONNRESET, ""}), CallerErrno(Error{ECONNRESET, "anything"}));
  EXPECT_EQ(CallerErrno(Error{ENOENT, "raced"}), ENOENT);
  EXPECT_EQ(CallerErrno(Error{}), EIO);  // the default Error
}

// Every errno value: the unreachable ones become EHOSTDOWN, the others stay.
TEST(CallerErrno, EveryErrnoValue) {
  for (int code = 1; code < 134; ++code) {  // EHWPOISON (133) is Linux's last
    SCOPED_TRACE(std::strerror(code));
    EXPECT_EQ(CallerErrno(Error{code, ""}), IsUnreachable(code) ? EHOSTDOWN : code);
  }
}

}  // namespace
}  // namespace fedfs
