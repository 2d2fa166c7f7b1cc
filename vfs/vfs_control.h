// The control command about the mount's view of files (control/schema.h):
// "where", the node(s) holding a global path. Its handler runs on the
// control server's thread and may block (it resolves the path).
#pragma once

#include "control/dispatcher.h"

namespace fedfs::ns {

class VfsImpl;

// Registers "where" on `vfs` (must outlive the dispatcher's serving; null:
// not served).
void RegisterVfsControl(control::Dispatcher& dispatcher, VfsImpl* vfs);

}  // namespace fedfs::ns
