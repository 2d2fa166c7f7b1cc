#include "control/dispatcher.h"

#include <exception>

namespace fedfs::control {

void Dispatcher::Add(std::string_view cmd, Raw handler) {
  handlers_.insert_or_assign(std::string(cmd), std::move(handler));
}

std::string Dispatcher::Handle(std::string_view line) const {
  try {
    auto request = ParseRequest(line);
    if (!request) return ErrorReply(request.error().context);
    auto it = handlers_.find(request->cmd);
    if (it == handlers_.end()) {
      return ErrorReply("cmd \"" + request->cmd + "\" is not served by this daemon");
    }
    auto reply = it->second(*request);
    if (!reply) return ErrorReply(reply.error().context);
    return std::move(*reply);
  } catch (const std::exception& e) {
    return ErrorReply(std::string("internal error: ") + e.what());
  }
}

}  // namespace fedfs::control
