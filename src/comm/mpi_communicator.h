#pragma once
// MPI backend: CPU tensors (and CUDA tensors, staged through pinned host memory on the
// communication thread: staging.h) over an MPI communicator, one communication thread per communicator
// (mpi_op_queue.h). Because every communicator has its own thread, MPI must provide
// MPI_THREAD_MULTIPLE; init_mpi_world checks it and fails with a clear message otherwise.
//
//   auto world = hlp::comm::init_mpi_world(argc, argv, {/*timeout_s=*/300});
//   ... world->all_reduce(grad, hlp::comm::ReduceOp::Avg) ...
//   hlp::comm::finalize();   // also run at exit if forgotten
#include <mpi.h>

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi_op_queue.h"

namespace hlp::comm {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of comm (freed on shutdown) unless it is MPI_COMM_WORLD / MPI_COMM_SELF.
  MpiCommunicator(MPI_Comm comm, CommOptions options);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }
  std::shared_ptr<Communicator> split(int color, int key) override;

  WorkPtr all_reduce_async(at::Tensor tensor, ReduceOp op) override;
  WorkPtr all_gather_async(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr broadcast_async(at::Tensor tensor, int root) override;
  WorkPtr send_async(at::Tensor tensor, int dst, int tag) override;
  WorkPtr recv_async(at::Tensor tensor, int src, int tag) override;
  WorkPtr barrier_async() override;
  WorkPtr all_to_all_async(at::Tensor input, at::Tensor output, std::vector<int64_t> send_counts,
                           std::vector<int64_t> recv_counts) override;

  // The underlying communicator, for code that calls MPI itself (parallel HDF5). MPI forbids
  // two threads running collectives on one communicator at once, so use it only while no
  // async op of this communicator is in flight, or better MPI_Comm_dup it once and use the dup.
  MPI_Comm mpi_comm() const { return comm_; }

  // Finishes queued ops, stops the thread and frees the MPI communicator. Idempotent;
  // finalize() calls it on every live communicator. Ops issued afterwards throw.
  void shutdown();

 private:
  WorkPtr enqueue(OpKind kind, int64_t bytes, int peer, std::function<void()> run,
                  bool reported = true);
  WorkPtr enqueue_p2p(OpKind kind, int64_t bytes, int peer, std::function<MPI_Request()> post,
                      std::function<void(const MPI_Status&)> finish);
  void check_cpu(const at::Tensor& tensor, const char* what) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool owns_comm_ = false;
  bool shut_down_ = false;
  std::shared_ptr<MpiOpQueue> queue_;
};

// Initialises MPI with MPI_THREAD_MULTIPLE (checked; clear error if the library cannot) and
// returns a communicator over a duplicate of MPI_COMM_WORLD. May be called when MPI is
// already initialised (then only the thread level is checked). Registers finalize() at exit.
std::shared_ptr<MpiCommunicator> init_mpi_world(int& argc, char**& argv,
                                                CommOptions options = CommOptions{});

// Shuts down every live MpiCommunicator (see shutdown()) and calls MPI_Finalize. Idempotent.
void finalize();

// True between init_mpi_world and finalize.
bool mpi_running();

// The MPI datatype used on the wire for a tensor dtype (bfloat16 -> MPI_UINT16_T bits).
MPI_Datatype mpi_wire_type(c10::ScalarType type);

}  // namespace hlp::comm
