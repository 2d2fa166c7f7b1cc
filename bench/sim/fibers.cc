// FiberScheduler (bench/sim/fibers.h) on Boost.Context fibers.
#include "bench/sim/fibers.h"

#include <sys/mman.h>

#include <boost/context/fiber.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "common/logging.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace fedfs::bench {

namespace ctx = boost::context;

namespace {

// AddressSanitizer is told of every switch between stacks (Boost.Context's
// fcontext switches have no such hooks): otherwise it takes a fiber's stack
// for the thread's and reports the unwinding of a fiber as an overflow.
// Nothing without ASan.
void StartSwitch(void** fake_stack, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}
void FinishSwitch(void* fake_stack, const void** bottom_old, size_t* size_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
  (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

// Thrown in a stuck fiber (from Suspend) to unwind it when the scheduler
// goes; caught at the fiber's bottom.
struct Cancelled {};

}  // namespace

// Stacks of one size, carved from large mappings and kept for reuse when a
// fiber ends. Not one mapping per stack (as boost's guarded stacks are): a
// simulation of a thousand nodes has tens of thousands of fibers alive at
// its peaks, and two mappings per stack (the stack and its guard page) would
// pass Linux's limit of 65530 mappings per process (vm.max_map_count), where
// the next mmap fails. Instead the lowest kCanaryBytes of each stack hold a
// pattern, checked when the stack comes back: an overflow aborts the run
// with a message instead of corrupting the simulation silently.
class FiberStackPool {
 public:
  explicit FiberStackPool(size_t bytes) : bytes_((bytes + kPage - 1) / kPage * kPage) {}
  ~FiberStackPool() {
    for (const auto& [base, len] : chunks_) ::munmap(base, len);
  }
  FiberStackPool(const FiberStackPool&) = delete;
  FiberStackPool& operator=(const FiberStackPool&) = delete;

  ctx::stack_context Take() {
    if (free_.empty()) Grow();
    char* base = free_.back();
    free_.pop_back();
    ctx::stack_context s;
    s.size = bytes_;
    s.sp = base + bytes_;  // stacks grow down from the top
    return s;
  }
  void Give(ctx::stack_context& s) noexcept {
    char* base = static_cast<char*>(s.sp) - s.size;
    for (size_t i = 0; i < kCanaryBytes / sizeof(uint64_t); ++i) {
      if (reinterpret_cast<const uint64_t*>(base)[i] != kCanary) {
        std::fprintf(stderr, "fedfs-bench: a fiber overflowed its %zu-byte stack\n", bytes_);
        std::abort();
      }
    }
    // Past the stacks kept warm, the pages go back to the kernel (all but
    // the canary's): a peak's stacks would otherwise stay resident.
    if (free_.size() >= kWarm) ::madvise(base + kPage, bytes_ - kPage, MADV_DONTNEED);
    free_.push_back(base);
  }

 private:
  static constexpr size_t kPage = 4096;
  static constexpr size_t kStacksPerChunk = 256;
  static constexpr size_t kCanaryBytes = 256;  // within the first page
  static constexpr size_t kWarm = 1024;
  static constexpr uint64_t kCanary = 0xfedf5fedf5fedf5full;

  void Grow() {
    const size_t len = bytes_ * kStacksPerChunk;
    void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    chunks_.emplace_back(m, len);
    char* base = static_cast<char*>(m);
    for (size_t i = kStacksPerChunk; i-- > 0;) {
      char* stack = base + i * bytes_;
      std::fill_n(reinterpret_cast<uint64_t*>(stack), kCanaryBytes / sizeof(uint64_t), kCanary);
      free_.push_back(stack);
    }
  }

  const size_t bytes_;
  std::vector<std::pair<void*, size_t>> chunks_;
  std::vector<char*> free_;  // the lowest address of each free stack
};

namespace {

}  // namespace

struct FiberScheduler::Fiber {
  ctx::fiber self;    // the fiber while it is suspended (empty while it runs)
  ctx::fiber caller;  // the main context, while the fiber runs
  std::move_only_function<void()> fn;
  bool done = false;
  bool cancel = false;  // unwind at the next resumption (Cancelled)
  Fiber* prev = nullptr;
  Fiber* next = nullptr;
  const void* stack_bottom = nullptr;  // for ASan's switch hooks
  size_t stack_size = 0;
  void* fake_stack = nullptr;
};

namespace {

// The StackAllocator each ctx::fiber is given; notes the stack's bounds.
struct PooledStack {
  FiberStackPool* pool;
  FiberScheduler::Fiber* fiber;
  ctx::stack_context allocate() {
    ctx::stack_context s = pool->Take();
    fiber->stack_bottom = static_cast<char*>(s.sp) - s.size;
    fiber->stack_size = s.size;
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { pool->Give(s); }
};

}  // namespace

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
    // Resumed once more, a suspended fiber throws Cancelled from where it
    // waits: its stack unwinds, its destructors run as that fiber.
    f->cancel = true;
    Switch(f);
    if (!f->done) Logger("sim")->error("a fiber survived its cancellation: leaked");
    else delete f;
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
  f->self = ctx::fiber(std::allocator_arg, PooledStack{stacks_.get(), f},
                       [this, f](ctx::fiber&& caller) {
                         FinishSwitch(nullptr, &main_bottom_, &main_size_);
                         f->caller = std::move(caller);
                         try {
                           f->fn();
                         } catch (const Cancelled&) {
                         }
                         f->fn = nullptr;  // its captures die here, as this fiber
                         f->done = true;
                         StartSwitch(nullptr, main_bottom_, main_size_);  // for good
                         return std::move(f->caller);
                       });
  Resume(f);
}

void FiberScheduler::Switch(Fiber* f) {
  current_ = f;
  StartSwitch(&main_fake_stack_, f->stack_bottom, f->stack_size);
  f->self = std::move(f->self).resume();
  FinishSwitch(main_fake_stack_, nullptr, nullptr);
  current_ = nullptr;
}

void FiberScheduler::Resume(Fiber* f) {
  Switch(f);
  if (!f->done) return;
  if (f->prev != nullptr) f->prev->next = f->next;
  else all_ = f->next;
  if (f->next != nullptr) f->next->prev = f->prev;
  delete f;
  --live_;
}

void FiberScheduler::Suspend() {
  Fiber* f = current_;
  StartSwitch(&f->fake_stack, main_bottom_, main_size_);
  f->caller = std::move(f->caller).resume();
  FinishSwitch(f->fake_stack, &main_bottom_, &main_size_);
  if (f->cancel) throw Cancelled{};
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
