// Cooperative waiting (common/cooperative.h).
#include "common/cooperative.h"

#include <thread>

namespace fedfs {

namespace cooperative_detail {
constinit thread_local Cooperative* installed = nullptr;
}  // namespace cooperative_detail

void SleepFor(std::chrono::nanoseconds d) {
  if (Cooperative* co = SuspendableContext(); co != nullptr) return co->Sleep(d);
  std::this_thread::sleep_for(d);
}

void SuspendingMutex::LockSuspending(Cooperative& co) {
  while (!mu_.try_lock()) {
    co_ = &co;
    waiters_.push_back(co.Current());
    co.Suspend();  // until an unlock wakes this fiber; then try again
  }
}

void SuspendingMutex::WakeOne() {
  const Cooperative::FiberId f = waiters_.front();
  waiters_.erase(waiters_.begin());
  co_->Wake(f);
}

}  // namespace fedfs
