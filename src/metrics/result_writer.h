#pragma once
// One HDF5 result file per job, written with parallel HDF5 (MPI-IO, collective transfers):
// every rank writes its own row of each /steps/<metric> matrix and its own /trace/rank<N>.
//
// Every member function marked COLLECTIVE must be called by all ranks of the communicator, in
// the same order. The natural loop is:
//
//   ResultWriter writer(MPI_COMM_WORLD, "results/job.h5", run_info, options);  // K = 10 default
//   writer.write_model(model_info, params_on_this_rank);          // COLLECTIVE
//   for (step ...) { ...; rec.record_step(step, m); writer.append(rec); }   // COLLECTIVE
//   writer.write_pipeline(pipeline_info);                         // COLLECTIVE, optional
//   writer.finish();                                              // COLLECTIVE: complete = 1
//
// Crash safety: the file is created with complete = 0 and flushed (H5Fflush) after every K
// steps, so a job killed with SIGKILL leaves a readable file holding every flushed step.
// Disk full and I/O errors: each flush writes and flushes the steps before the trace; every
// rank agrees on the outcome of each batch of writes. Out of space, the writer frees its reserve
// (PATH.reserve, WriterOptions::reserve_bytes), drops the trace and goes on with the steps; a
// failure after that, or any other I/O error, throws hlp::IoError on every rank naming the file
// and the OS reason, and the file stays as its last successful flush left it (readable,
// complete = 0).
// Errors (bad path, unknown metric, ranks out of step) throw hlp::UserError on every rank.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "metrics/result_info.h"

namespace hlp::metrics {

class ResultWriter {
 public:
  // COLLECTIVE. Creates (truncates) the file and its parent directory, writes the root
  // attributes (complete = 0) and creates every /steps and /trace dataset empty.
  ResultWriter(MPI_Comm comm, const std::string& path, const RunInfo& info,
               const WriterOptions& options = {});
  // Without finish(): closes the file, complete stays 0 (COLLECTIVE, like every H5Fclose).
  // While an exception unwinds, it does not close (a lone failing rank would hang in the
  // collective close): the file stays as the last flush left it.
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // COLLECTIVE. `/model` attributes from rank 0; params_per_rank gathered from every rank.
  void write_model(const ModelInfo& model, int64_t params_local);
  // COLLECTIVE. `/pipeline` attributes from rank 0 (may be called again to update).
  void write_pipeline(const PipelineInfo& pipeline);
  // COLLECTIVE. `/context_parallel` attributes (`info` the same on every rank).
  void write_context_parallel(const ContextParallelInfo& info);
  // COLLECTIVE. `/experts` (`info` the same on every rank; rank 0 writes the datasets).
  void write_experts(const ExpertsInfo& info);

  // Local: buffer one step row / trace events of this rank.
  void append_step(const StepRecord& row);
  void append_events(std::vector<TraceEvent> events);

  // COLLECTIVE. Takes the recorder's pending steps and events, then flushes if K or more steps
  // are buffered (all ranks hold the same number of steps, so all decide alike).
  void append(Recorder& recorder);

  // COLLECTIVE. Writes every buffered step and event and H5Fflush-es the file.
  void flush();

  // COLLECTIVE. Records why the run ends before its last step (root attribute
  // stopped_reason, rank 0's text); complete stays 0.
  void set_stopped_reason(const std::string& reason);

  // COLLECTIVE. Final flush, /summary (medians after warm-up), end_time, complete = 1, close.
  // Idempotent.
  void finish();

  int64_t steps_written() const;
  int64_t buffered_steps() const;
  const std::string& path() const;
  // "" while the trace is written; else the write error after which it was dropped (disk full:
  // the steps go on in the space of the reserve, see WriterOptions::reserve).
  const std::string& trace_dropped() const;

 private:
  void write_summary();  // COLLECTIVE, from finish()
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hlp::metrics
