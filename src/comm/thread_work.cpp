#include "comm/thread_work.h"

#include <chrono>
#include <sstream>

namespace hlp::comm {

void ThreadWork::wait_until_done() {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool tell = block_hook_ && !done_;
  if (tell) {  // outside this op's lock: the hook takes the queue's
    lock.unlock();
    block_hook_(true);
    lock.lock();
  }
  const auto limit = std::chrono::duration<double>(timeout_s_);
  const bool done = done_cv_.wait_for(lock, limit, [this] { return done_; });
  lock.unlock();
  if (tell) block_hook_(false);
  if (!done) abort_on_timeout(kind_, bytes_, timeout_s_);
  lock.lock();
  if (error_) std::rethrow_exception(error_);
}

bool ThreadWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void ThreadWork::mark_done(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

void abort_on_timeout(OpKind kind, int64_t bytes, double timeout_s) {
  std::ostringstream os;
  os << "rank " << world_rank_for_messages() << ": " << op_kind_name(kind) << " of " << bytes
     << " bytes did not complete within " << timeout_s
     << " s; a peer rank probably died or hung (timeout: --comm-timeout-s)";
  abort_all(os.str(), kCommTimeoutExitCode);
}

}  // namespace hlp::comm
