// The daemon's side of the control protocol (control/schema.h): one handler
// per command, registered by name by the part whose state it shows
// (cluster/membership_control.h: status, ring; vfs/vfs_control.h: where;
// vd/vd_control.h: conflicts, dt; files/files_control.h: files). Each
// request line is parsed once (ParseRequest: the command, its path checked
// and normalised) before its handler sees it; the handler's reply is
// encoded here.
//
// Threads: handlers are registered before the dispatcher serves (before
// ControlServer::Start; registration is not synchronised with Handle), then
// Handle runs on the control server's connection threads, several requests
// at once: handlers must be thread-safe. A handler may block (it holds its
// client's connection meanwhile, not the others').
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/result.h"
#include "control/schema.h"

namespace fedfs::control {

class Dispatcher {
 public:
  // Registers `handler` (callable as Result<R>(const Request&), R one of the
  // replies of schema.h) for R's command, replacing an earlier one. An error
  // it returns is answered {"error": its context}.
  template <class F>
  void Register(F handler) {
    using R = typename std::invoke_result_t<F&, const Request&>::value_type;
    Add(R::kCommand.name, [h = std::move(handler)](const Request& q) -> Result<std::string> {
      Result<R> r = h(q);
      if (!r) return Err(std::move(r.error()));
      return EncodeReply(*r);
    });
  }

  // True when a handler for `cmd` is registered.
  bool Serves(std::string_view cmd) const { return handlers_.find(cmd) != handlers_.end(); }

  // Answers one request line (without its newline): untrusted bytes (any
  // user able to open the socket), answered with one JSON object on one
  // line, {"error": ...} for anything malformed, unknown, not served here or
  // failed. Never throws or crashes.
  std::string Handle(std::string_view line) const;

 private:
  using Raw = std::function<Result<std::string>(const Request&)>;
  void Add(std::string_view cmd, Raw handler);

  std::map<std::string, Raw, std::less<>> handlers_;
};

}  // namespace fedfs::control
