// Global paths: the names FedFS uses between nodes.
//
// A global path is absolute, "/" alone for the root, otherwise "/c1/c2/..."
// with components that are non-empty, not "." or "..", contain neither '/'
// nor NUL, and are at most NAME_MAX (255) bytes. There is no limit on the
// total length (paths longer than PATH_MAX are valid; the local layer walks
// them in pieces). Every path that arrives from the network is checked with
// ValidateGlobalPath before use; a path that fails is refused (EINVAL for
// malformed, ENAMETOOLONG for a long component) and logged by the caller.
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace fedfs::ns {

// Ok iff `path` is a global path as defined above (exact form: no trailing
// slash, no "//").
Status ValidateGlobalPath(std::string_view path);

// Ok iff `name` is a valid single component.
Status ValidateName(std::string_view name);

// "/a/b" + "c" -> "/a/b/c"; "/" + "c" -> "/c". `name` must be a valid name.
std::string JoinPath(std::string_view dir, std::string_view name);

// "/a/b/c" -> "/a/b"; "/a" -> "/"; "/" -> "/".
std::string_view ParentPath(std::string_view path);

// "/a/b/c" -> "c"; "/" -> "".
std::string_view BaseName(std::string_view path);

// True iff `path` equals `dir` or lies beneath it ("/a" contains "/a/b",
// not "/ab").
bool PathWithin(std::string_view path, std::string_view dir);

// The path relative to the export root, as given to *at() calls: "/" -> ".",
// "/a/b" -> "a/b".
std::string_view RelativePath(std::string_view path);

}  // namespace fedfs::ns
