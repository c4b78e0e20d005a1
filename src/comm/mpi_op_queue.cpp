#include "comm/mpi_op_queue.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "common/clock.h"

namespace hlp::comm {
namespace {
// How often the idle comm thread checks an inline op's deadline: timeouts fire at most this
// late. Four wake-ups a second per communicator cost nothing measurable.
constexpr std::chrono::milliseconds kWatchdogPeriod(250);
// Pending point-to-point ops are tested every kFastPoll while a caller is blocked on one (its
// core is idle then) and after every post or completion; with no caller waiting, the interval
// doubles after each fruitless test up to kBackgroundPoll. Measured on a 2-core machine
// (interleaved pipeline, sends pending for most of every compute action): at a fixed 50 us the
// comm thread's 20000 wake-ups a second made the stage's compute 4-7 % longer in wall time than
// in CPU time; a send completes at most kBackgroundPoll late, and nothing waits on it then.
constexpr std::chrono::microseconds kFastPoll(50);
constexpr std::chrono::microseconds kBackgroundPoll(1000);
std::atomic<int64_t> g_poll_rounds{0};
}  // namespace

int64_t mpi_p2p_poll_rounds() { return g_poll_rounds.load(); }

MpiOpQueue::~MpiOpQueue() {
  // Owners call stop() first; this only covers an owner that forgot (no timeout then).
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpiOpQueue::start_thread_locked() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void MpiOpQueue::push(MpiTask task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw std::logic_error("communicator used after it was shut down");
    queue_.push_back(std::move(task));
    start_thread_locked();
  }
  cv_.notify_all();
}

bool MpiOpQueue::try_run_inline(MpiTask& task, double timeout_s) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw std::logic_error("communicator used after it was shut down");
    if (!queue_.empty() || running_ || inline_running_) return false;
    inline_running_ = true;
    inline_deadline_s_ = now_s() + timeout_s;
    inline_record_ = task.record;
    inline_timeout_s_ = timeout_s;
    // The idle comm thread is the watchdog; it polls every kWatchdogPeriod, so no wake-up
    // (a context switch per op) is needed here.
    start_thread_locked();
  }
  {
    c10::AutoGradMode no_grad(false);
    run_task(task);
  }
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inline_running_ = false;
    queued = !queue_.empty();
  }
  if (queued) cv_.notify_all();  // ops pushed meanwhile waited for this one
  return true;
}

void MpiOpQueue::caller_blocked(bool blocked) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocked_callers_ += blocked ? 1 : -1;
  }
  if (blocked) cv_.notify_all();  // out of a background sleep: poll fast from now
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
  double cpu_reported_s = thread_cpu_s();  // this thread's CPU time already added to the total
  for (;;) {
    const double cpu_s = thread_cpu_s();
    add_comm_thread_cpu_s(cpu_s - cpu_reported_s);
    cpu_reported_s = cpu_s;
    MpiTask task;
    bool have_task = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        if (!queue_.empty() && !inline_running_) {
          task = std::move(queue_.front());
          queue_.pop_front();
          have_task = true;
          running_ = static_cast<bool>(task.run);
          break;
        }
        if (inline_running_ && now_s() > inline_deadline_s_) {
          const OpRecord record = inline_record_;
          const double timeout_s = inline_timeout_s_;
          lock.unlock();
          abort_on_timeout(record.kind, record.bytes, timeout_s);
        }
        if (stopping_ && queue_.empty() && pending_.empty() && !inline_running_) {
          exited_ = true;
          exited_cv_.notify_all();
          return;
        }
        if (!pending_.empty()) {  // sends/recvs in flight: test them again soon
          if (blocked_callers_ > 0) {
            cv_.wait_for(lock, kFastPoll);
          } else {
            cv_.wait_for(lock, poll_interval_);
            poll_interval_ = std::min(poll_interval_ * 2, kBackgroundPoll);
          }
          break;
        }
        // Idle: sleep until an op arrives, waking every kWatchdogPeriod to check on an op
        // that a caller thread runs inline.
        cv_.wait_for(lock, kWatchdogPeriod);
      }
    }
    if (have_task) {
      if (task.run) {
        run_task(task);
        std::lock_guard<std::mutex> lock(mutex_);
        running_ = false;
      } else {
        post_p2p(std::move(task));
      }
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
    poll_interval_ = kFastPoll;
  } catch (...) {
    complete(task, std::current_exception());
  }
}

void MpiOpQueue::poll_p2p() {
  if (!pending_.empty()) g_poll_rounds.fetch_add(1, std::memory_order_relaxed);
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
    poll_interval_ = kFastPoll;
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
  // The op's closures hold its tensors (staging buffers, the caller's inputs and outputs):
  // they go now, on this thread, before the waiter wakes. Destroyed later (with the task, at
  // the end of the loop iteration) they would outlive wait() by a thread switch, and whether
  // they are still alive when the caller allocates its next buffers would decide the peak.
  task.run = nullptr;
  task.post = nullptr;
  task.finish = nullptr;
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
