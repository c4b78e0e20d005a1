#pragma once
// One communication thread per MPI communicator: executes that communicator's ops in issue
// order (the CPU analogue of an NCCL stream). The thread starts on the first op.
//
// Collectives run to completion on the thread, one after another. Point-to-point ops are
// posted (MPI_Isend / MPI_Irecv) in issue order and then tested between later ops, so a send
// does not block the queue until the peer receives it.
//
// Sync collectives issued while the queue is idle (nothing queued, nothing running) run inline
// on the calling thread instead: same order, no thread hand-off (which costs tens of µs, and
// milliseconds on an oversubscribed node). Meanwhile the comm thread is the watchdog: if the
// inline op outlives its timeout, it aborts the job exactly as Work::wait() would.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/observer.h"
#include "comm/thread_work.h"

namespace hlp::comm {

struct MpiTask {
  std::shared_ptr<ThreadWork> work;
  OpRecord record;  // kind, bytes, group_size, peer, async filled in; times by the queue
  // Collective: runs the whole op.
  std::function<void()> run;
  // Point-to-point (when run is empty): posts the request; finish runs after it completed.
  std::function<MPI_Request()> post;
  std::function<void(const MPI_Status&)> finish;
  bool reported = true;  // false: not passed to the observer (internal setup ops)
};

// How many times the comm threads of this process have tested their pending point-to-point ops
// (MPI_Test rounds), for tests of the polling rate.
int64_t mpi_p2p_poll_rounds();

class MpiOpQueue {
 public:
  using Reporter = std::function<void(const OpRecord&)>;
  explicit MpiOpQueue(Reporter reporter) : reporter_(std::move(reporter)) {}
  ~MpiOpQueue();
  MpiOpQueue(const MpiOpQueue&) = delete;
  MpiOpQueue& operator=(const MpiOpQueue&) = delete;

  void push(MpiTask task);

  // A caller thread starts (true) or stops (false) blocking on one of this queue's
  // point-to-point ops. While none does, pending sends and receives are polled with a backoff
  // from kFastPoll to kBackgroundPoll (each poll wakes this thread on the core the caller
  // computes on); while one does, every kFastPoll.
  void caller_blocked(bool blocked);

  // Runs a collective task on the calling thread if the queue is idle; false (task untouched)
  // otherwise, and the caller pushes it instead.
  bool try_run_inline(MpiTask& task, double timeout_s);

  // Lets queued ops finish, then stops the thread. If it is still busy after timeout_s
  // (a peer never joined), aborts the job with a message.
  void stop(double timeout_s);

 private:
  struct PendingP2P {
    MpiTask task;
    MPI_Request request;
  };
  void loop();
  void start_thread_locked();
  void run_task(MpiTask& task);
  void post_p2p(MpiTask task);
  void poll_p2p();
  void complete(MpiTask& task, std::exception_ptr error);

  Reporter reporter_;
  std::mutex mutex_;
  std::condition_variable cv_;        // wakes the comm thread: new task or stop
  std::condition_variable exited_cv_; // tells stop() that the thread left its loop
  std::deque<MpiTask> queue_;
  bool running_ = false;          // the comm thread is executing a collective
  bool inline_running_ = false;   // a caller thread is executing a collective inline
  double inline_deadline_s_ = 0;  // when the inline op times out (hlp::now_s clock)
  OpRecord inline_record_{};      // what the inline op is, for the timeout message
  double inline_timeout_s_ = 0;
  bool stopping_ = false;
  bool exited_ = false;
  std::thread thread_;
  std::vector<PendingP2P> pending_;  // comm thread only
  int blocked_callers_ = 0;           // callers inside wait() on a p2p op (caller_blocked)
  std::chrono::microseconds poll_interval_{50};  // comm thread only: the next background poll
};

}  // namespace hlp::comm
