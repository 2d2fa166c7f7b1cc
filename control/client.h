// The client side of the control protocol (control/schema.h): what fedfsctl
// uses to find a daemon's control socket and ask it one request. Every
// error's context is one line fit for the user ("fedfsd is not running
// (control socket ...)", "fedfsd: <the daemon's error>", ...).
// Blocking; any thread.
#pragma once

#include <chrono>
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
// at most `timeout` for the reply (0: as long as it takes; the commands
// that answer when a long job is done, such as migrate and rebalance).
// Errors: the daemon cannot be reached, gave no answer in time (ETIMEDOUT),
// closed without an answer, answered something that is not a JSON object,
// or answered {"error":E} (context "fedfsd: E").
Result<std::string> Ask(const std::string& socket, const Request& request,
                        std::chrono::seconds timeout = std::chrono::seconds(10));

// A reply line as fedfsctl --json prints it: the same JSON, indented by two
// spaces. A line that is not JSON comes back as it is.
std::string Indented(std::string_view reply);

}  // namespace fedfs::control
