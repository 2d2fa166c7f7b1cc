#include "files/files_control.h"

#include "files/file_service.h"
#include "files/remote_node_fs.h"

namespace fedfs::ns {

control::FilesReply FilesStatus(const FileService& files, const FsCallbacks& callbacks,
                                const std::string& self) {
  const FileService::Stats s = files.stats();
  control::FilesReply r;
  r.node = self;
  r.sessions = s.sessions;
  r.sessions_expired = s.sessions_expired;
  r.handles = s.handles;
  r.watches = s.watches;
  r.served = s.served;
  r.refused = s.refused;
  r.callbacks_sent = s.callbacks_sent;
  r.callbacks_failed = s.callbacks_failed;
  r.pinned = s.pinned;
  r.lease_waits = s.lease_waits;
  r.callbacks_received = callbacks.received();
  r.callbacks_refused = callbacks.refused();
  r.data_bytes = s.inline_bytes + s.one_sided_bytes;
  return r;
}

void RegisterFilesControl(control::Dispatcher& dispatcher, const FileService* files,
                          const FsCallbacks* callbacks, const std::string& self,
                          std::function<void(control::FilesReply&)> more) {
  if (files == nullptr || callbacks == nullptr) return;
  dispatcher.Register([files, callbacks, self, more = std::move(more)](
                          const control::Request&) -> Result<control::FilesReply> {
    control::FilesReply r = FilesStatus(*files, *callbacks, self);
    if (more) more(r);
    return r;
  });
}

}  // namespace fedfs::ns
