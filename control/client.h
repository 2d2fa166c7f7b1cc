// The client side of the control protocol (control/schema.h): what fedfsctl
// uses to find a daemon's control socket and ask it one request. Every
// error's context is one line fit for the user ("fedfsd is not running
// (control socket ...)", "fedfsd: <the daemon's error>", ...).
// Blocking; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "control/schema.h"

namespace fedfs::control {

// The one control socket (a *.sock file) in `dir` (kDefaultSocketDir when
// fedfsctl is given neither --socket nor --config). ENOENT when there is
// none, EEXIST when there are several.
Result<std::string> OnlySocketIn(const std::string& dir);

// Sends `request` on a new connection to the daemon at `socket` and returns
// its reply line (without the newline): a JSON object, not an error. Waits
// at most 10 s for the reply. Errors: the daemon cannot be reached, closed
// without an answer, answered something that is not a JSON object, or
// answered {"error":E} (context "fedfsd: E").
Result<std::string> Ask(const std::string& socket, const Request& request);

// A reply line as fedfsctl --json prints it: the same JSON, indented by two
// spaces. A line that is not JSON comes back as it is.
std::string Indented(std::string_view reply);

}  // namespace fedfs::control
