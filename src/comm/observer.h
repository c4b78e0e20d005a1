#pragma once
// What the communicator tells the outside world about each operation it ran.
// Kept free of LibTorch and MPI so that the recorder (src/metrics) can implement it cheaply.
#include <cstdint>

namespace hlp::comm {

enum class OpKind { AllReduce, AllGather, ReduceScatter, Broadcast, Send, Recv, Barrier, AllToAll };

const char* op_kind_name(OpKind kind);  // "all_reduce", "all_gather", ... (defined in comm)

// One finished operation. Times are seconds on the steady clock of this process
// (hlp::now_s() from common/clock.h), so they line up with the recorder's compute events.
struct OpRecord {
  OpKind kind;
  int64_t bytes;        // payload bytes this rank contributed (send side), not wire bytes;
                        // all_to_all: the bytes it sent to the other ranks (not to itself)
  double start_s;       // when the op began executing (on the comm thread for async ops)
  double end_s;         // when it completed
  int group_size;       // size of the communicator it ran on
  int peer;             // send/recv peer rank within that communicator, -1 otherwise
  bool async;           // issued through an *_async call
};

// One interval in which a thread was blocked waiting for an op: Work::wait() of an async op, or
// the whole issue-and-wait of a sync form. Waits for ops that had already completed are
// reported too (their interval is a few microseconds).
struct WaitRecord {
  OpKind kind;
  double start_s;  // hlp::now_s() clock, like OpRecord
  double end_s;
};

// Pluggable observer. Called on the thread that executed the op (possibly the comm thread):
// implementations must be thread-safe and cheap.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_comm_op(const OpRecord& record) = 0;
  // Called on the blocked thread after each wait (see WaitRecord). Default: ignored.
  virtual void on_comm_wait(const WaitRecord& record) {}
};

}  // namespace hlp::comm
