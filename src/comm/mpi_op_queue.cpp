#include "comm/mpi_op_queue.h"

#include <c10/core/GradMode.h>

#include <chrono>
#include <sstream>

#include "common/clock.h"

namespace hlp::comm {

MpiOpQueue::~MpiOpQueue() {
  // Owners call stop() first; this only covers an owner that forgot (no timeout then).
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpiOpQueue::push(MpiTask task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw std::logic_error("communicator used after it was shut down");
    queue_.push_back(std::move(task));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_one();
}

void MpiOpQueue::stop(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  cv_.notify_all();
  if (!thread_.joinable()) return;
  const bool exited = exited_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                          [this] { return exited_; });
  lock.unlock();
  if (!exited) {
    std::ostringstream os;
    os << "rank " << world_rank_for_messages() << ": communicator shutdown: queued ops did not "
       << "complete within " << timeout_s << " s; a peer rank probably died or hung";
    abort_all(os.str(), kCommTimeoutExitCode);
  }
  thread_.join();
}

void MpiOpQueue::loop() {
  // Staging copies on this thread must not be recorded by autograd.
  c10::GradMode::set_enabled(false);
  for (;;) {
    MpiTask task;
    bool have_task = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [this] { return stopping_ || !queue_.empty(); };
      if (pending_.empty())
        cv_.wait(lock, ready);
      else  // sends/recvs in flight: test them again soon
        cv_.wait_for(lock, std::chrono::microseconds(50), ready);
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        have_task = true;
      } else if (stopping_ && pending_.empty()) {
        exited_ = true;
        exited_cv_.notify_all();
        return;
      }
    }
    if (have_task) {
      if (task.run)
        run_task(task);
      else
        post_p2p(std::move(task));
    }
    poll_p2p();
  }
}

void MpiOpQueue::run_task(MpiTask& task) {
  task.record.start_s = now_s();
  std::exception_ptr error;
  try {
    task.run();
  } catch (...) {
    error = std::current_exception();
  }
  complete(task, error);
}

void MpiOpQueue::post_p2p(MpiTask task) {
  task.record.start_s = now_s();
  try {
    MPI_Request request = task.post();
    pending_.push_back(PendingP2P{std::move(task), request});
  } catch (...) {
    complete(task, std::current_exception());
  }
}

void MpiOpQueue::poll_p2p() {
  for (size_t i = 0; i < pending_.size();) {
    int done = 0;
    MPI_Status status;
    MPI_Test(&pending_[i].request, &done, &status);
    if (!done) {
      ++i;
      continue;
    }
    MpiTask task = std::move(pending_[i].task);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    std::exception_ptr error;
    try {
      if (task.finish) task.finish(status);
    } catch (...) {
      error = std::current_exception();
    }
    complete(task, error);
  }
}

void MpiOpQueue::complete(MpiTask& task, std::exception_ptr error) {
  task.record.end_s = now_s();
  // Report before waking the waiter, so a returned wait() implies a reported op.
  if (!error && reporter_ && task.reported) {
    try {
      reporter_(task.record);
    } catch (...) {
      error = std::current_exception();
    }
  }
  task.work->mark_done(error);
}

}  // namespace hlp::comm
