#pragma once
// Per-rank recorder: trace events (RAII spans, comm ops from the communicator's observer hook,
// anything else through add_event) and per-step metrics. Times come from hlp::now_s() and are
// stored as seconds since a run start that align_clocks() makes common to all ranks.
//
//   hlp::metrics::Recorder rec(rank);
//   rec.align_clocks(MPI_COMM_WORLD);            // collective, once, before recording
//   communicator.set_observer(&rec);              // comm ops land on the comm lane
//   rec.begin_step(step);
//   { auto s = rec.span("forward", Lane::Compute, step, micro); ... }   // event on scope exit
//   rec.record_step(step, {{schema::kLoss, loss}, ...});
//   writer.append(rec);                           // collective; flushes every K steps
//
// Thread-safe: spans, add_event and on_comm_op may be called from any thread.
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/observer.h"
#include "common/clock.h"
#include "metrics/trace_event.h"

namespace hlp::metrics {

// Result of the clock alignment: rank_time + offset_s = rank-0 time (both hlp::now_s()).
struct ClockAlignment {
  double offset_s = 0.0;     // add to this rank's now_s() to get rank 0's now_s()
  double rtt_s = 0.0;        // round trip of the best ping-pong sample (error <= rtt_s / 2)
  double run_start_s = 0.0;  // run start on rank 0's clock; event times are relative to it
};

// Estimates every rank's clock offset against rank 0 by ping-pong (min-RTT sample of `rounds`),
// then broadcasts rank 0's now as the run start. Collective over comm.
ClockAlignment align_clocks(MPI_Comm comm, int rounds = 8);

class Recorder : public comm::Observer {
 public:
  explicit Recorder(int rank = 0);

  // Collective: see align_clocks(). Call before recording; events recorded earlier keep the
  // origin they were stored with (the construction time).
  void align_clocks(MPI_Comm comm, int rounds = 8);
  const ClockAlignment& clock() const { return clock_; }
  int rank() const { return rank_; }

  // raw hlp::now_s() value -> seconds since the aligned run start
  double to_run_time(double raw_now_s) const {
    return raw_now_s + clock_.offset_s - clock_.run_start_s;
  }
  double run_time_now() const { return to_run_time(hlp::now_s()); }

  // With tracing off, spans still time themselves (Span::end() returns seconds) but no event is
  // stored; step metrics and comm byte counts are always kept.
  void set_tracing(bool on) { tracing_.store(on, std::memory_order_relaxed); }
  bool tracing() const { return tracing_.load(std::memory_order_relaxed); }

  // The step that comm ops reported through on_comm_op are attributed to.
  void begin_step(int64_t step) { current_step_.store(step, std::memory_order_relaxed); }
  int64_t current_step() const { return current_step_.load(std::memory_order_relaxed); }

  // RAII span: records [construction, end()/destruction) as one event. Move-only.
  class Span {
   public:
    Span() = default;
    Span(Span&& other) noexcept;
    Span& operator=(Span&& other) noexcept;
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    ~Span() { end(); }
    // Ends the span (idempotent); returns its duration in seconds (0 if already ended).
    double end();
    void set_bytes(int64_t bytes) { bytes_ = bytes; }

   private:
    friend class Recorder;
    Recorder* recorder_ = nullptr;
    const char* name_ = nullptr;
    std::string owned_name_;  // set by the std::string overload (then name_ is unused)
    const char* category_ = nullptr;
    Lane lane_ = Lane::Compute;
    int64_t step_ = -1;
    int32_t micro_batch_ = -1;
    int64_t bytes_ = 0;
    double start_raw_s_ = 0.0;
  };

  // name and category must outlive the span (string literals are the intended use).
  Span span(const char* name, Lane lane, int64_t step = -1, int32_t micro_batch = -1,
            const char* category = nullptr);
  // For names built at run time ("layer3.mixer"): the span keeps its own copy.
  Span span(std::string name, Lane lane, int64_t step = -1, int32_t micro_batch = -1,
            const char* category = nullptr);

  // Adds a finished event; start/end are raw hlp::now_s() values.
  void add_event(std::string name, std::string category, Lane lane, double start_raw_s,
                 double end_raw_s, int64_t step = -1, int32_t micro_batch = -1,
                 int64_t bytes = 0);

  // comm::Observer: every finished communicator op becomes a comm-lane event named after its
  // kind ("all_reduce" ...), category "comm", bytes = payload, step = current_step().
  void on_comm_op(const comm::OpRecord& record) override;
  // comm::Observer: every interval a thread was blocked waiting for an op becomes a
  // compute-lane event "wait:<kind>" (nested in the forward / backward span it happened in),
  // category "comm_wait" for collectives and "pipeline_wait" for send / recv: the trace shows
  // exactly the seconds that comm_exposed_s and pipeline_wait_s sum up. Tracing only.
  void on_comm_wait(const comm::WaitRecord& record) override;

  // Comm traffic since the previous call (always counted, tracing on or off).
  struct CommTotals {
    int64_t bytes = 0;
    int64_t ops = 0;
    double busy_s = 0.0;  // sum of op durations (overlapping async ops counted fully)
  };
  CommTotals take_comm_totals();

  // Stores one step's metrics. Adds schema::kStepEnd (run time now) when it is missing.
  void record_step(int64_t step, StepMetrics values);

  // Drain what was recorded since the last call (the writer calls these).
  std::vector<TraceEvent> take_events();
  std::vector<StepRecord> take_steps();
  size_t pending_events() const;

 private:
  void store(TraceEvent&& event);

  int rank_ = 0;
  ClockAlignment clock_;
  std::atomic<bool> tracing_{true};
  std::atomic<int64_t> current_step_{-1};

  mutable std::mutex mutex_;  // guards everything below
  std::vector<TraceEvent> events_;
  std::vector<StepRecord> steps_;
  CommTotals comm_;
};

}  // namespace hlp::metrics
