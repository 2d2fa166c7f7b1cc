#include "tests/posix/targets.h"

#include <map>
#include <memory>
#include <stdexcept>

#include <gtest/gtest.h>

#include "tests/posix/fedfs_target.h"

namespace fedfs::testing {
namespace {

struct TargetSlot {
  std::unique_ptr<MountTarget> target;
  std::string why_not;
  bool tried = false;
};

std::map<std::string, TargetSlot>& Slots() {
  static std::map<std::string, TargetSlot> slots;
  return slots;
}

std::unique_ptr<MountTarget> Create(const std::string& name, std::string* why) {
  if (name == "native" || name == "native-ref") return MakeNativeTarget();
  if (name == "passthrough_ll") return MakePassthroughLlTarget(why);
  if (name == "fedfs-local") return MakeFedfsTarget(FedfsPlacement::kLocal, why);
  if (name == "fedfs-remote") return MakeFedfsTarget(FedfsPlacement::kRemote, why);
  *why = "unknown target " + name;
  return nullptr;
}

class TargetsEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { Slots().clear(); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new TargetsEnvironment);

}  // namespace

MountTarget* GetTarget(const std::string& name, std::string* why) {
  TargetSlot& s = Slots()[name];
  if (!s.tried) {
    s.tried = true;
    try {
      s.target = Create(name, &s.why_not);
    } catch (const std::exception& e) {
      s.why_not = e.what();
    }
  }
  *why = s.why_not;
  return s.target.get();
}

}  // namespace fedfs::testing
