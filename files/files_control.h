// The control command about remote file operations (control/schema.h):
// "files", this node's FileService (other nodes' sessions, their open
// handles, requests, change callbacks sent) and the callbacks its
// FsCallbacks took for files it has open elsewhere.
#pragma once

#include <functional>
#include <string>

#include "control/dispatcher.h"
#include "control/schema.h"

namespace fedfs::ns {

class FileService;
class FsCallbacks;

// The "files" reply, this node being `self`.
control::FilesReply FilesStatus(const FileService& files, const FsCallbacks& callbacks,
                                const std::string& self);

// Registers "files" on `files` and `callbacks` (both must outlive the
// dispatcher's serving; either null: not served).
// `more` (optional) adds what the mount knows (deferred opens).
void RegisterFilesControl(control::Dispatcher& dispatcher, const FileService* files,
                          const FsCallbacks* callbacks, const std::string& self,
                          std::function<void(control::FilesReply&)> more = {});

}  // namespace fedfs::ns
