#include "metrics/recorder.h"

#include <utility>

#include "metrics/schema.h"

namespace hlp::metrics {

namespace {
// Local copy of comm::op_kind_name(): metrics links nothing of comm but its observer header.
const char* comm_op_name(comm::OpKind kind) {
  switch (kind) {
    case comm::OpKind::AllReduce: return "all_reduce";
    case comm::OpKind::AllGather: return "all_gather";
    case comm::OpKind::ReduceScatter: return "reduce_scatter";
    case comm::OpKind::Broadcast: return "broadcast";
    case comm::OpKind::Send: return "send";
    case comm::OpKind::Recv: return "recv";
    case comm::OpKind::Barrier: return "barrier";
    case comm::OpKind::AllToAll: return "all_to_all";
  }
  return "comm_op";
}
}  // namespace

Recorder::Recorder(int rank) : rank_(rank) {
  // Until align_clocks() runs, the origin is this process's construction time.
  clock_.run_start_s = hlp::now_s();
}

void Recorder::align_clocks(MPI_Comm comm, int rounds) {
  clock_ = metrics::align_clocks(comm, rounds);
}

// ---- Span ------------------------------------------------------------------------------------

Recorder::Span::Span(Span&& other) noexcept { *this = std::move(other); }

Recorder::Span& Recorder::Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    recorder_ = std::exchange(other.recorder_, nullptr);
    name_ = other.name_;
    owned_name_ = std::move(other.owned_name_);
    category_ = other.category_;
    lane_ = other.lane_;
    step_ = other.step_;
    micro_batch_ = other.micro_batch_;
    bytes_ = other.bytes_;
    start_raw_s_ = other.start_raw_s_;
  }
  return *this;
}

double Recorder::Span::end() {
  if (recorder_ == nullptr) return 0.0;
  const double end_raw_s = hlp::now_s();
  Recorder* rec = std::exchange(recorder_, nullptr);
  if (rec->tracing()) {
    rec->add_event(name_ ? std::string(name_) : std::move(owned_name_),
                   category_ ? category_ : lane_name(lane_), lane_, start_raw_s_,
                   end_raw_s, step_, micro_batch_, bytes_);
  }
  return end_raw_s - start_raw_s_;
}

Recorder::Span Recorder::span(const char* name, Lane lane, int64_t step, int32_t micro_batch,
                              const char* category) {
  Span s;
  s.recorder_ = this;
  s.name_ = name;
  s.category_ = category;
  s.lane_ = lane;
  s.step_ = step;
  s.micro_batch_ = micro_batch;
  s.start_raw_s_ = hlp::now_s();
  return s;
}

Recorder::Span Recorder::span(std::string name, Lane lane, int64_t step, int32_t micro_batch,
                              const char* category) {
  Span s = span(static_cast<const char*>(nullptr), lane, step, micro_batch, category);
  s.owned_name_ = std::move(name);
  return s;
}

// ---- events ----------------------------------------------------------------------------------

void Recorder::add_event(std::string name, std::string category, Lane lane, double start_raw_s,
                         double end_raw_s, int64_t step, int32_t micro_batch, int64_t bytes) {
  if (!tracing()) return;
  TraceEvent e;
  e.name = std::move(name);
  e.category = std::move(category);
  e.lane = lane;
  e.start_s = to_run_time(start_raw_s);
  e.end_s = to_run_time(end_raw_s);
  e.step = step;
  e.micro_batch = micro_batch;
  e.bytes = bytes;
  store(std::move(e));
}

void Recorder::store(TraceEvent&& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.capacity() == 0) events_.reserve(4096);  // skip the first dozen regrowths
  events_.push_back(std::move(event));
}

void Recorder::on_comm_op(const comm::OpRecord& record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_.bytes += record.bytes;
    comm_.ops += 1;
    comm_.busy_s += record.end_s - record.start_s;
  }
  add_event(comm_op_name(record.kind), "comm", Lane::Comm, record.start_s, record.end_s,
            current_step(), -1, record.bytes);
}

void Recorder::on_comm_wait(const comm::WaitRecord& record) {
  if (!tracing()) return;
  const bool p2p = record.kind == comm::OpKind::Send || record.kind == comm::OpKind::Recv;
  add_event(std::string("wait:") + comm_op_name(record.kind), p2p ? "pipeline_wait" : "comm_wait",
            Lane::Compute, record.start_s, record.end_s, current_step());
}

Recorder::CommTotals Recorder::take_comm_totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(comm_, CommTotals{});
}

// ---- steps -----------------------------------------------------------------------------------

void Recorder::record_step(int64_t step, StepMetrics values) {
  values.emplace(schema::kStepEnd, run_time_now());  // keeps a caller-given value
  std::lock_guard<std::mutex> lock(mutex_);
  steps_.push_back(StepRecord{step, std::move(values)});
}

std::vector<TraceEvent> Recorder::take_events() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(events_, {});
}

std::vector<StepRecord> Recorder::take_steps() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(steps_, {});
}

size_t Recorder::pending_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

}  // namespace hlp::metrics
