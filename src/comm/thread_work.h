#pragma once
// A Work completed by another thread (the communication thread of an MPI communicator).
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

#include "comm/communicator.h"

namespace hlp::comm {

class ThreadWork : public Work {
 public:
  ThreadWork(OpKind kind, int64_t bytes, double timeout_s, std::shared_ptr<Observer> observer)
      : Work(kind, std::move(observer)), kind_(kind), bytes_(bytes), timeout_s_(timeout_s) {}

  bool is_completed() override;

  // Called once by the thread that ran the op; error is null on success.
  void mark_done(std::exception_ptr error);

  // Told true when a caller starts blocking on this op (it was not done yet) and false when
  // that caller returns: the MPI queue polls point-to-point ops fast only while a caller waits.
  void set_block_hook(std::function<void(bool)> hook) { block_hook_ = std::move(hook); }

 protected:
  void wait_until_done() override;

 private:
  const OpKind kind_;
  const int64_t bytes_;
  const double timeout_s_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::function<void(bool)> block_hook_;
};

// Prints the timeout line ("rank R: all_reduce of N bytes did not complete within T s; ...")
// and aborts the job with kCommTimeoutExitCode.
[[noreturn]] void abort_on_timeout(OpKind kind, int64_t bytes, double timeout_s);

}  // namespace hlp::comm
