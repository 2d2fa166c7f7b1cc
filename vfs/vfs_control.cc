#include "vfs/vfs_control.h"

#include "control/schema.h"
#include "vfs/vfs_impl.h"

namespace fedfs::ns {

void RegisterVfsControl(control::Dispatcher& dispatcher, VfsImpl* vfs) {
  if (vfs == nullptr) return;
  dispatcher.Register([vfs](const control::Request& q) -> Result<control::WhereReply> {
    auto holders = vfs->Where(q.path);
    if (!holders) return Err(holders.error().code, q.path + ": " + holders.error().ToString());
    control::WhereReply r;
    r.path = q.path;
    r.holders = std::move(*holders);
    return r;
  });
  dispatcher.Register([vfs](const control::Request& q) -> Result<control::ListReply> {
    auto entries = vfs->List(q.path);
    if (!entries) return Err(entries.error().code, q.path + ": " + entries.error().ToString());
    control::ListReply r;
    r.path = q.path;
    for (VdEntry& e : *entries) {
      r.entries.push_back({std::move(e.name), DirentTypeName(e.type), std::move(e.holders)});
    }
    return r;
  });
}

}  // namespace fedfs::ns
