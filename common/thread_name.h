// NameThread: names a thread as top -H, perf and /proc/<pid>/task/<tid>/comm
// show it (the first 15 characters), so that a profile or a stuck daemon
// tells its FUSE queue threads, transport progress thread, watchers and
// pools apart.
#pragma once

#include <string>
#include <thread>

namespace fedfs {

void NameThread(std::thread& t, const std::string& name);

}  // namespace fedfs
