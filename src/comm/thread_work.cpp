#include "comm/thread_work.h"

#include <chrono>
#include <sstream>

namespace hlp::comm {

void ThreadWork::wait_until_done() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto limit = std::chrono::duration<double>(timeout_s_);
  if (!done_cv_.wait_for(lock, limit, [this] { return done_; })) {
    lock.unlock();
    abort_on_timeout(kind_, bytes_, timeout_s_);
  }
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
