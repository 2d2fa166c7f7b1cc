#include "common/executor.h"

#include "common/thread_name.h"

namespace fedfs {

ThreadPool::ThreadPool(size_t threads, std::string name) : name_(std::move(name)) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Run(); });
    NameThread(threads_.back(), name_);
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Post(Task task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::Run() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace fedfs
