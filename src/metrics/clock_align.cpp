// Clock alignment across ranks by ping-pong against rank 0 (Cristian's algorithm, min-RTT sample).
// Rank r's estimate: offset = (t0 + t1) / 2 - t_r, where rank 0 sent at t0, rank r read its clock
// t_r on receipt and replied, rank 0 received at t1. If the two clocks tick at the same rate the
// error is at most (t1 - t0) / 2, so the sample with the smallest round trip is kept.
#include <limits>

#include "common/clock.h"
#include "metrics/recorder.h"

namespace hlp::metrics {

ClockAlignment align_clocks(MPI_Comm user_comm, int rounds) {
  // A private communicator: our ping-pong cannot match anyone else's messages.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(user_comm, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (rounds < 1) rounds = 1;
  const int kTag = 7301;
  ClockAlignment result;

  if (rank == 0) {
    for (int peer = 1; peer < size; ++peer) {
      double best_rtt = std::numeric_limits<double>::infinity();
      double best_offset = 0.0;
      for (int i = 0; i < rounds; ++i) {
        const double t0 = hlp::now_s();
        double t_peer = 0.0;
        MPI_Send(&t0, 1, MPI_DOUBLE, peer, kTag, comm);
        MPI_Recv(&t_peer, 1, MPI_DOUBLE, peer, kTag, comm, MPI_STATUS_IGNORE);
        const double t1 = hlp::now_s();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best_offset = 0.5 * (t0 + t1) - t_peer;
        }
      }
      const double answer[2] = {best_offset, best_rtt};
      MPI_Send(answer, 2, MPI_DOUBLE, peer, kTag, comm);
    }
  } else {
    for (int i = 0; i < rounds; ++i) {
      double t0 = 0.0;
      MPI_Recv(&t0, 1, MPI_DOUBLE, 0, kTag, comm, MPI_STATUS_IGNORE);
      const double t_here = hlp::now_s();
      MPI_Send(&t_here, 1, MPI_DOUBLE, 0, kTag, comm);
    }
    double answer[2] = {0.0, 0.0};
    MPI_Recv(answer, 2, MPI_DOUBLE, 0, kTag, comm, MPI_STATUS_IGNORE);
    result.offset_s = answer[0];
    result.rtt_s = answer[1];
  }
  // The run starts now on rank 0's clock, for everyone.
  MPI_Barrier(comm);
  double start = rank == 0 ? hlp::now_s() : 0.0;
  MPI_Bcast(&start, 1, MPI_DOUBLE, 0, comm);
  result.run_start_s = start;
  MPI_Comm_free(&comm);
  return result;
}

}  // namespace hlp::metrics
