#pragma once
// Pipeline schedules as generated tables (--pp-schedule, --pp-virtual): for every stage, the
// ordered list of its compute actions. PipelineStrategy (pipeline_run.cpp) executes a stage's
// list as it is; the activation predictor and hlp-analyze read the same tables, and simulate()
// runs all lists on an ideal clock to give each schedule's theoretical bubble.
//
// p stages, V model chunks per stage, M micro-batches. Virtual stage g = c * p + s is chunk c of
// stage s (Megatron's interleaved layout): blocks flow 0 -> 1 -> ... -> pV - 1, so the output of
// stage p - 1's chunk c goes to stage 0's chunk c + 1.
//
//   gpipe        F for every micro-batch, then the fused backward BW for every one (V = 1).
//   1f1b         p - s - 1 warm-up forwards, then one F and one BW at a time, then the
//                remaining BW (V = 1).
//   interleaved  Megatron's interleaved 1F1B over the M V (chunk, micro-batch) units: micro-batch
//                groups of p go through chunk 0, then chunk 1, ...; (p - s - 1) 2 + (V - 1) p
//                warm-up forwards; backwards walk the chunks in reverse (V >= 2, M a multiple
//                of p).
//   zb-h1        Zero Bubble's H1 (Qi et al., arXiv 2401.10241): the 1F1B order of F and B,
//                with the backward split into B (input gradient) and W (weight gradients).
//                Stage s keeps up to s W passes deferred, so a later stage returns gradients
//                without waiting for its W and the earlier stages fill their waits with theirs
//                (V = 1). Every stage then holds at most p micro-batches from F to W, as 1F1B's
//                stage 0 does.
//
// Theory (docs/strategies.md): per stage, with f, b, w the time of one micro-batch's F, B and W
// through the whole stage, the idle time of a step is
//   gpipe, 1f1b   (p - 1)(f + b + w)
//   interleaved   (p - 1)(f + b + w) / V
//   zb-h1         (p - 1)(f + b - w)          (w <= f + b)
// and the bubble fraction is idle / (idle + M (f + b + w)).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace hlp::parallel {

// --pp-schedule.
enum class PipeSchedule : uint8_t { gpipe, one_f_one_b, interleaved, zb_h1 };
inline constexpr EnumName<PipeSchedule> kPipeScheduleNames[] = {
    {PipeSchedule::gpipe, "gpipe"},
    {PipeSchedule::one_f_one_b, "1f1b"},
    {PipeSchedule::interleaved, "interleaved"},
    {PipeSchedule::zb_h1, "zb-h1"}};
inline PipeSchedule parse_pipe_schedule(const std::string& text) {
  return parse_enum("pp-schedule", text, kPipeScheduleNames);
}
inline const char* to_string(PipeSchedule s) { return enum_name(s, kPipeScheduleNames); }

enum class PipeOp : uint8_t {
  F,   // forward of one micro-batch through one chunk
  BW,  // fused backward: input and weight gradients
  B,   // backward for the input gradient only (zb-h1)
  W,   // the weight gradients of a B done earlier (zb-h1)
};
const char* to_string(PipeOp op);

struct PipeAction {
  PipeOp op = PipeOp::F;
  int chunk = 0;  // model chunk on this stage, 0 <= chunk < V
  int micro = 0;  // micro-batch, 0 <= micro < M
  bool operator==(const PipeAction& o) const {
    return op == o.op && chunk == o.chunk && micro == o.micro;
  }
};

struct PipeSpec {
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  int stages = 1;                 // p
  int chunks = 1;                 // V (--pp-virtual)
  int micro_batches = 1;          // M
  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  bool splits_backward() const { return schedule == PipeSchedule::zb_h1; }
};

// Throws hlp::UserError naming the option to change when the combination cannot run:
// --pp-virtual other than 1 outside interleaved, interleaved with V < 2 or with M not a
// multiple of p.
void validate_schedule(const PipeSpec& spec);

// The ordered compute actions of `stage`.
std::vector<PipeAction> stage_actions(const PipeSpec& spec, int stage);

// A point-to-point message between neighbouring virtual stages: the activation of a forward
// (to virtual stage g + 1) or the input gradient of a backward (to g - 1).
struct PipeMessage {
  bool valid = false;
  bool gradient = false;
  int from_stage = 0, to_stage = 0;
  int to_chunk = 0;  // the receiving chunk
  int micro = 0;
  int tag = 0;       // unique per (direction, receiving chunk, micro-batch)
};
// What `action` on `stage` sends (F: its output, BW / B: its input gradient), or invalid.
PipeMessage message_sent(const PipeSpec& spec, int stage, const PipeAction& action);
// What `action` on `stage` must receive before it runs (F: its input, BW / B: its output
// gradient), or invalid.
PipeMessage message_needed(const PipeSpec& spec, int stage, const PipeAction& action);
// Every message `from_stage` sends to `to_stage` in one step, in the order it sends them.
std::vector<PipeMessage> messages_between(const PipeSpec& spec, int from_stage, int to_stage);

// The largest total weight alive at once on a stage: a (chunk, micro-batch) is alive from its F
// until its last backward action (BW, or W when the backward is split). weight(chunk) is what
// one alive micro-batch of that chunk holds (1 for a count); after_b(chunk), if given, what it
// holds in addition from its B to its W.
double peak_alive(const std::vector<PipeAction>& actions, const std::function<double(int)>& weight,
                  const std::function<double(int)>& after_b = nullptr);
// Micro-batches a stage holds at once at most (peak_alive with weight 1).
int64_t peak_in_flight(const PipeSpec& spec, int stage);

// Durations of one micro-batch through one chunk of a stage.
struct PipeCosts {
  double f = 1.0, b = 1.0, w = 1.0;  // BW takes b + w
  double of(PipeOp op) const {
    return op == PipeOp::F ? f : op == PipeOp::BW ? b + w : op == PipeOp::B ? b : w;
  }
};

struct PipeSimulation {
  double makespan = 0.0;
  std::vector<double> busy;  // [p]: compute time of each stage
  std::vector<double> idle;  // [p]: makespan - busy
  double bubble_fraction() const;  // mean over stages of idle / makespan
};

// Runs every stage's actions on an ideal clock (messages take no time; an action starts when
// its stage is free and what it needs has arrived). costs: one entry for all, one per stage
// (applied to each of its chunks), or one per virtual stage g = c p + s (p V entries).
// Throws std::logic_error if the tables deadlock (a generator bug).
PipeSimulation simulate(const PipeSpec& spec, const std::vector<PipeCosts>& costs);

// The same clock with the duration of every action given: durations[s][i] is how long action i
// of stage s's table took (a step's trace, replayed: what the table's dependencies alone make of
// the measured durations, without message latency). Throws std::invalid_argument when a stage's
// list does not have its table's length.
PipeSimulation replay(const PipeSpec& spec, const std::vector<std::vector<double>>& durations);

// The mean duration of each virtual stage's F, B and W (a fused BW counted as b, w = 0) in one
// step's durations (as replay() takes them): the per-chunk costs a step had, for simulate().
// Throws std::invalid_argument like replay().
std::vector<PipeCosts> mean_costs(const PipeSpec& spec,
                                  const std::vector<std::vector<double>>& durations);

// The length of stage s's table without building it (M F and M V backward units...), to check
// input before generating a table whose size comes from a file.
int64_t stage_action_count(const PipeSpec& spec);

// The closed-form bubble fraction of the schedule for per-stage costs f, b, w of one
// micro-batch through the whole stage (all its chunks).
double bubble_theory(const PipeSpec& spec, double f, double b, double w);

}  // namespace hlp::parallel
