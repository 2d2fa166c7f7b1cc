#include "common/path.h"

#include <climits>

namespace fedfs::ns {

Status ValidateName(std::string_view name) {
  if (name.empty()) return Err(EINVAL, "empty name");
  if (name == "." || name == "..") return Err(EINVAL, "name '" + std::string(name) + "'");
  if (name.size() > NAME_MAX) return Err(ENAMETOOLONG, "name longer than 255 bytes");
  for (char c : name) {
    if (c == '/' || c == '\0') return Err(EINVAL, "name contains '/' or NUL");
  }
  return Ok();
}

Status ValidateGlobalPath(std::string_view path) {
  if (path.empty() || path[0] != '/') return Err(EINVAL, "path is not absolute");
  if (path == "/") return Ok();
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (auto st = ValidateName(path.substr(start, end - start)); !st) {
      return Err(st.error().code, "path component: " + st.error().context);
    }
    start = end + 1;
  }
  return Ok();
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out != "/") out += '/';
  out += name;
  return out;
}

std::string_view ParentPath(std::string_view path) {
  size_t pos = path.rfind('/');
  if (pos == 0 || pos == std::string_view::npos) return "/";
  return path.substr(0, pos);
}

std::string_view BaseName(std::string_view path) {
  if (path == "/") return "";
  return path.substr(path.rfind('/') + 1);
}

bool PathWithin(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path[0] == '/';
  if (path.size() < dir.size() || path.substr(0, dir.size()) != dir) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

std::string_view RelativePath(std::string_view path) {
  if (path == "/") return ".";
  return path.substr(1);
}

}  // namespace fedfs::ns
