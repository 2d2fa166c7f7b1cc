// A mutex that clang's thread-safety analysis (-Wthread-safety) knows, and
// the annotations that say what it guards.
//
// Members written FEDFS_GUARDED_BY(mu_) may be touched only with mu_ held;
// a function marked FEDFS_REQUIRES(mu_) is called with it held (the *Locked
// helpers), one marked FEDFS_EXCLUDES(mu_) without. clang checks this at
// compile time (the fuzz build, tests/fuzz, compiles with -Wthread-safety
// and -Werror); for other compilers the macros expand to nothing, and Mutex
// is a std::mutex. Hold it with MutexLock (a std::lock_guard the analysis
// sees); wait on a std::condition_variable with Mutex::Wait / WaitUntil.
// Not for std::lock_guard or std::unique_lock: the analysis does not see
// them take a Mutex, and reports what follows as unguarded.
#pragma once

#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define FEDFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FEDFS_THREAD_ANNOTATION(x)
#endif

#define FEDFS_CAPABILITY(x) FEDFS_THREAD_ANNOTATION(capability(x))
#define FEDFS_SCOPED_CAPABILITY FEDFS_THREAD_ANNOTATION(scoped_lockable)
#define FEDFS_GUARDED_BY(x) FEDFS_THREAD_ANNOTATION(guarded_by(x))
#define FEDFS_PT_GUARDED_BY(x) FEDFS_THREAD_ANNOTATION(pt_guarded_by(x))
#define FEDFS_REQUIRES(...) FEDFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define FEDFS_EXCLUDES(...) FEDFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define FEDFS_ACQUIRE(...) FEDFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define FEDFS_RELEASE(...) FEDFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define FEDFS_NO_THREAD_SAFETY_ANALYSIS FEDFS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace fedfs {

class FEDFS_CAPABILITY("mutex") Mutex {
 public:
  void lock() FEDFS_ACQUIRE() { mu_.lock(); }
  void unlock() FEDFS_RELEASE() { mu_.unlock(); }

  // cv.wait(pred) with this mutex held: released while waiting, held again
  // when it returns. `pred` runs with it held (mark a lambda that reads
  // guarded members FEDFS_REQUIRES(mu_)).
  template <class Pred>
  void Wait(std::condition_variable& cv, Pred pred) FEDFS_REQUIRES(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    StillHeld keep{lock};
    cv.wait(lock, std::move(pred));
  }
  // cv.wait_until(deadline, pred): false if the deadline passed with `pred`
  // still false.
  template <class TimePoint, class Pred>
  bool WaitUntil(std::condition_variable& cv, const TimePoint& deadline, Pred pred)
      FEDFS_REQUIRES(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    StillHeld keep{lock};
    return cv.wait_until(lock, deadline, std::move(pred));
  }

 private:
  // The caller's MutexLock holds the mutex and releases it: the waits'
  // unique_lock gives it back, however they end.
  struct StillHeld {
    std::unique_lock<std::mutex>& lock;
    ~StillHeld() { lock.release(); }
  };
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::lock_guard).
class FEDFS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FEDFS_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() FEDFS_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace fedfs
