#include "common/timers.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <thread>

#include "common/thread_name.h"

namespace fedfs {

struct Timers::Impl {
  boost::asio::io_context io{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;
};

Timers::Timers(std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([io = &impl_->io] { io->run(); });
  NameThread(impl_->thread, name);
}

Timers::~Timers() {
  impl_->work.reset();
  impl_->io.stop();
  impl_->thread.join();
}

void Timers::After(std::chrono::nanoseconds delay, Task task) {
  auto timer = std::make_shared<boost::asio::steady_timer>(impl_->io, delay);
  auto t = std::make_shared<Task>(std::move(task));
  timer->async_wait([timer, t](const boost::system::error_code& ec) {
    if (!ec) (*t)();
  });
}

}  // namespace fedfs
