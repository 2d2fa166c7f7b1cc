// FiberScheduler (bench/sim/fibers.h) on Boost.Context fibers.
#include "bench/sim/fibers.h"

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <utility>
#include <vector>

#include "common/logging.h"

namespace fedfs::bench {

namespace ctx = boost::context;

// Guarded stacks of one size, kept for reuse when a fiber ends.
class FiberStackPool {
 public:
  explicit FiberStackPool(size_t bytes) : alloc_(bytes) {}
  ~FiberStackPool() {
    for (ctx::stack_context& s : free_) alloc_.deallocate(s);
  }
  FiberStackPool(const FiberStackPool&) = delete;
  FiberStackPool& operator=(const FiberStackPool&) = delete;

  ctx::stack_context Take() {
    if (free_.empty()) return alloc_.allocate();
    ctx::stack_context s = free_.back();
    free_.pop_back();
    return s;
  }
  void Give(ctx::stack_context& s) noexcept {
    if (free_.size() < kMaxFree) {
      free_.push_back(s);
    } else {
      alloc_.deallocate(s);
    }
  }

 private:
  static constexpr size_t kMaxFree = 1024;
  ctx::protected_fixedsize_stack alloc_;
  std::vector<ctx::stack_context> free_;
};

namespace {

// The StackAllocator each ctx::fiber is given.
struct PooledStack {
  FiberStackPool* pool;
  ctx::stack_context allocate() { return pool->Take(); }
  void deallocate(ctx::stack_context& s) noexcept { pool->Give(s); }
};

}  // namespace

struct FiberScheduler::Fiber {
  ctx::fiber self;    // the fiber while it is suspended (empty while it runs)
  ctx::fiber caller;  // the main context, while the fiber runs
  std::move_only_function<void()> fn;
  bool done = false;
  Fiber* prev = nullptr;
  Fiber* next = nullptr;
};

FiberScheduler::FiberScheduler(m2m::FakeNetwork& net, size_t stack_bytes)
    : net_(net), stacks_(std::make_unique<FiberStackPool>(stack_bytes)), installed_(this) {}

FiberScheduler::~FiberScheduler() {
  if (live_ > 0) {
    Logger("sim")->warn("{} fiber(s) still suspended at the end: unwound", live_);
  }
  while (all_ != nullptr) {
    Fiber* f = all_;
    all_ = f->next;
    if (all_ != nullptr) all_->prev = nullptr;
    // Destroying a suspended fiber unwinds its stack (boost::context's
    // forced_unwind), running its destructors as that fiber.
    current_ = f;
    { ctx::fiber dead = std::move(f->self); }
    current_ = nullptr;
    delete f;
    --live_;
  }
}

void FiberScheduler::Spawn(std::move_only_function<void()> fn) {
  if (current_ == nullptr) return Start(std::move(fn));
  net_.Schedule(m2m::SimDuration(0),
                [this, fn = std::move(fn)]() mutable { Start(std::move(fn)); });
}

void FiberScheduler::Start(std::move_only_function<void()> fn) {
  auto* f = new Fiber;
  f->fn = std::move(fn);
  f->next = all_;
  if (all_ != nullptr) all_->prev = f;
  all_ = f;
  ++spawned_;
  max_live_ = std::max(max_live_, ++live_);
  f->self = ctx::fiber(std::allocator_arg, PooledStack{stacks_.get()},
                       [f](ctx::fiber&& caller) {
                         f->caller = std::move(caller);
                         f->fn();
                         f->fn = nullptr;  // its captures die here, as this fiber
                         f->done = true;
                         return std::move(f->caller);
                       });
  Resume(f);
}

void FiberScheduler::Resume(Fiber* f) {
  current_ = f;
  f->self = std::move(f->self).resume();
  current_ = nullptr;
  if (!f->done) return;
  if (f->prev != nullptr) f->prev->next = f->next;
  else all_ = f->next;
  if (f->next != nullptr) f->next->prev = f->prev;
  delete f;
  --live_;
}

void FiberScheduler::Suspend() {
  Fiber* f = current_;
  f->caller = std::move(f->caller).resume();
}

void FiberScheduler::Wake(FiberId id) {
  auto* f = static_cast<Fiber*>(id);
  net_.Schedule(m2m::SimDuration(0), [this, f] { Resume(f); });
}

void FiberScheduler::Sleep(std::chrono::nanoseconds d) {
  Fiber* f = current_;
  net_.Schedule(d, [this, f] { Resume(f); });
  Suspend();
}

std::chrono::steady_clock::time_point FiberScheduler::Now() const {
  // One second past the clock's zero: code takes time_point{} for "never".
  return std::chrono::steady_clock::time_point(std::chrono::seconds(1)) +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(net_.Now());
}

}  // namespace fedfs::bench
