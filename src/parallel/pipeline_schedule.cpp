// The schedule generators, their messages, and the ideal-clock simulation (pipeline_schedule.h).
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <stdexcept>

#include "common/error.h"

namespace hlp::parallel {

const char* to_string(PipeOp op) {
  switch (op) {
    case PipeOp::F: return "F";
    case PipeOp::BW: return "BW";
    case PipeOp::B: return "B";
    default: return "W";
  }
}

void validate_schedule(const PipeSpec& spec) {
  if (spec.stages < 1 || spec.micro_batches < 1 || spec.chunks < 1)
    throw user_error("pipeline: stages, --pp-virtual and micro-batches must be at least 1");
  if (spec.schedule == PipeSchedule::interleaved) {
    if (spec.stages < 2)
      throw user_error("--pp-schedule interleaved needs --pp 2 or more (one stage has no "
                       "bubble to interleave)");
    if (spec.chunks < 2)
      throw user_error("--pp-schedule interleaved needs --pp-virtual V >= 2 (model chunks per "
                       "stage); got ", spec.chunks);
    if (spec.micro_batches % spec.stages != 0)
      throw user_error("--pp-schedule interleaved needs the micro-batches per step (",
                       spec.micro_batches, " = global batch / (dp x micro-batch)) to be a "
                       "multiple of --pp ", spec.stages, "; change --global-batch or "
                       "--micro-batch");
  } else if (spec.schedule == PipeSchedule::zb_h1 && spec.stages < 2) {
    // one stage has no bubble to fill, and its one chunk would hold a tied embedding twice
    throw user_error("--pp-schedule zb-h1 needs --pp 2 or more (one stage has no bubble to fill)");
  } else if (spec.chunks != 1) {
    throw user_error("--pp-virtual ", spec.chunks, " needs --pp-schedule interleaved (",
                     to_string(spec.schedule), " holds one chunk per stage)");
  }
}

namespace {

std::vector<PipeAction> gpipe(int M) {
  std::vector<PipeAction> out;
  for (int m = 0; m < M; ++m) out.push_back({PipeOp::F, 0, m});
  for (int m = 0; m < M; ++m) out.push_back({PipeOp::BW, 0, m});
  return out;
}

std::vector<PipeAction> one_f_one_b(int p, int s, int M) {
  std::vector<PipeAction> out;
  const int warmup = std::min(p - s - 1, M);
  int next_f = 0, next_b = 0;
  for (int i = 0; i < warmup; ++i) out.push_back({PipeOp::F, 0, next_f++});
  for (int i = warmup; i < M; ++i) {
    out.push_back({PipeOp::F, 0, next_f++});
    out.push_back({PipeOp::BW, 0, next_b++});
  }
  while (next_b < M) out.push_back({PipeOp::BW, 0, next_b++});
  return out;
}

// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): unit k of the
// M V forward units is micro-batch (k / pV) p + k % p of chunk (k % pV) / p; backward unit k the
// same micro-batch of chunk V - 1 - (k % pV) / p.
std::vector<PipeAction> interleaved(int p, int V, int s, int M) {
  const int total = M * V;
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * V)) / p;
    return forward ? c : V - 1 - c;
  };
  auto micro_of = [&](int k) { return (k / (p * V)) * p + k % p; };
  const int warmup = M == p ? total : std::min(total, (p - s - 1) * 2 + (V - 1) * p);
  std::vector<PipeAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back({PipeOp::F, chunk_of(k, true), micro_of(k)});
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back({PipeOp::F, chunk_of(warmup + k, true), micro_of(warmup + k)});
    out.push_back({PipeOp::BW, chunk_of(k, false), micro_of(k)});
  }
  for (int k = total - warmup; k < total; ++k)
    out.push_back({PipeOp::BW, chunk_of(k, false), micro_of(k)});
  return out;
}

// ZB-H1: 1F1B's F / B order; stage s runs the W of its oldest pending micro-batch as soon as
// more than s are pending, and the rest after its last B.
std::vector<PipeAction> zb_h1(int p, int s, int M) {
  std::vector<PipeAction> out;
  const int warmup = std::min(p - s - 1, M);
  std::deque<int> pending;
  int next_f = 0;
  for (int i = 0; i < warmup; ++i) out.push_back({PipeOp::F, 0, next_f++});
  for (int next_b = 0; next_b < M; ++next_b) {
    if (next_f < M) out.push_back({PipeOp::F, 0, next_f++});
    out.push_back({PipeOp::B, 0, next_b});
    pending.push_back(next_b);
    if (int(pending.size()) > s) {
      out.push_back({PipeOp::W, 0, pending.front()});
      pending.pop_front();
    }
  }
  for (int m : pending) out.push_back({PipeOp::W, 0, m});
  return out;
}

}  // namespace

std::vector<PipeAction> stage_actions(const PipeSpec& spec, int stage) {
  validate_schedule(spec);
  if (stage < 0 || stage >= spec.stages)
    throw std::logic_error("stage_actions: stage " + std::to_string(stage) + " of " +
                           std::to_string(spec.stages));
  const int p = spec.stages, M = spec.micro_batches;
  switch (spec.schedule) {
    case PipeSchedule::gpipe: return gpipe(M);
    case PipeSchedule::one_f_one_b: return one_f_one_b(p, stage, M);
    case PipeSchedule::interleaved: return interleaved(p, spec.chunks, stage, M);
    case PipeSchedule::zb_h1: break;
  }
  return zb_h1(p, stage, M);
}

namespace {

PipeMessage make_message(const PipeSpec& spec, bool gradient, int from_g, int to_g, int micro) {
  PipeMessage msg;
  msg.valid = true;
  msg.gradient = gradient;
  msg.from_stage = from_g % spec.stages;
  msg.to_stage = to_g % spec.stages;
  msg.to_chunk = to_g / spec.stages;
  msg.micro = micro;
  msg.tag = (micro * spec.chunks + msg.to_chunk) * 2 + (gradient ? 1 : 0);
  return msg;
}

}  // namespace

PipeMessage message_sent(const PipeSpec& spec, int stage, const PipeAction& a) {
  const int g = spec.virtual_stage(stage, a.chunk), last = spec.virtual_stages() - 1;
  if (a.op == PipeOp::F && g < last) return make_message(spec, false, g, g + 1, a.micro);
  if ((a.op == PipeOp::BW || a.op == PipeOp::B) && g > 0)
    return make_message(spec, true, g, g - 1, a.micro);
  return {};
}

PipeMessage message_needed(const PipeSpec& spec, int stage, const PipeAction& a) {
  const int g = spec.virtual_stage(stage, a.chunk), last = spec.virtual_stages() - 1;
  if (a.op == PipeOp::F && g > 0) return make_message(spec, false, g - 1, g, a.micro);
  if ((a.op == PipeOp::BW || a.op == PipeOp::B) && g < last)
    return make_message(spec, true, g + 1, g, a.micro);
  return {};
}

std::vector<PipeMessage> messages_between(const PipeSpec& spec, int from_stage, int to_stage) {
  std::vector<PipeMessage> out;
  for (const auto& a : stage_actions(spec, from_stage)) {
    const PipeMessage msg = message_sent(spec, from_stage, a);
    if (msg.valid && msg.to_stage == to_stage) out.push_back(msg);
  }
  return out;
}

double peak_alive(const std::vector<PipeAction>& actions, const std::function<double(int)>& weight,
                  const std::function<double(int)>& after_b) {
  std::map<std::pair<int, int>, double> alive;  // (chunk, micro) -> what it holds now
  double now = 0.0, peak = 0.0;
  for (const auto& a : actions) {
    const auto key = std::make_pair(a.chunk, a.micro);
    if (a.op == PipeOp::F) {
      const double w = weight(a.chunk);
      alive[key] = w;
      now += w;
    } else if (a.op == PipeOp::B && after_b) {
      const double extra = after_b(a.chunk);
      alive[key] += extra;
      now += extra;
    } else if (a.op == PipeOp::BW || a.op == PipeOp::W) {
      auto it = alive.find(key);
      if (it != alive.end()) {
        now -= it->second;
        alive.erase(it);
      }
    }
    peak = std::max(peak, now);
  }
  return peak;
}

int64_t peak_in_flight(const PipeSpec& spec, int stage) {
  return int64_t(peak_alive(stage_actions(spec, stage), [](int) { return 1.0; }) + 0.5);
}

double PipeSimulation::bubble_fraction() const {
  if (idle.empty() || makespan <= 0) return 0.0;
  double sum = 0.0;
  for (double i : idle) sum += i / makespan;
  return sum / double(idle.size());
}

namespace {

// The ideal clock over every stage's table; duration(s, i, action) gives each action's time.
PipeSimulation run_clock(const PipeSpec& spec,
                         const std::function<double(int, size_t, const PipeAction&)>& duration) {
  const int p = spec.stages, G = spec.virtual_stages(), M = spec.micro_batches;
  std::vector<std::vector<PipeAction>> lists;
  for (int s = 0; s < p; ++s) lists.push_back(stage_actions(spec, s));
  // When each virtual stage's forward and input-gradient backward of a micro-batch ends.
  const double kNotYet = -1.0;
  std::vector<double> f_end(size_t(G * M), kNotYet), b_end(size_t(G * M), kNotYet);
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free_at(size_t(p), 0.0);
  PipeSimulation sim;
  sim.busy.assign(size_t(p), 0.0);
  size_t remaining = 0;
  for (const auto& l : lists) remaining += l.size();
  while (remaining > 0) {
    bool progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[size_t(s)] < lists[size_t(s)].size()) {
        const PipeAction& a = lists[size_t(s)][next[size_t(s)]];
        const int g = spec.virtual_stage(s, a.chunk);
        double ready = free_at[size_t(s)];
        const PipeMessage need = message_needed(spec, s, a);
        if (need.valid) {
          const int from_g = need.gradient ? g + 1 : g - 1;
          const double t = need.gradient ? b_end[size_t(from_g * M + a.micro)]
                                         : f_end[size_t(from_g * M + a.micro)];
          if (t == kNotYet) break;  // not arrived yet: try the other stages
          ready = std::max(ready, t);
        }
        const double d = duration(s, next[size_t(s)], a);
        free_at[size_t(s)] = ready + d;
        sim.busy[size_t(s)] += d;
        if (a.op == PipeOp::F) f_end[size_t(g * M + a.micro)] = ready + d;
        if (a.op == PipeOp::BW || a.op == PipeOp::B) b_end[size_t(g * M + a.micro)] = ready + d;
        ++next[size_t(s)];
        --remaining;
        progress = true;
      }
    }
    if (!progress)
      throw std::logic_error(std::string("pipeline schedule ") + to_string(spec.schedule) +
                             " deadlocks (p " + std::to_string(p) + ", V " +
                             std::to_string(spec.chunks) + ", M " + std::to_string(M) + ")");
  }
  sim.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int s = 0; s < p; ++s) sim.idle.push_back(sim.makespan - sim.busy[size_t(s)]);
  return sim;
}

}  // namespace

PipeSimulation simulate(const PipeSpec& spec, const std::vector<PipeCosts>& costs) {
  const int p = spec.stages, G = spec.virtual_stages();
  if (costs.empty() || (costs.size() != 1 && int(costs.size()) != p && int(costs.size()) != G))
    throw std::logic_error("simulate: costs must have 1, p or p V entries");
  return run_clock(spec, [&](int s, size_t, const PipeAction& a) {
    const int g = spec.virtual_stage(s, a.chunk);
    const PipeCosts& c = costs.size() == 1         ? costs[0]
                         : int(costs.size()) == G ? costs[size_t(g)]
                                                  : costs[size_t(s)];
    return c.of(a.op);
  });
}

int64_t stage_action_count(const PipeSpec& spec) {
  validate_schedule(spec);
  const int64_t units = int64_t(spec.micro_batches) * spec.chunks;
  return spec.splits_backward() ? 3 * units : 2 * units;
}

namespace {

// A step's durations as replay() and mean_costs() take them: one list per stage, each its
// table's length; else std::invalid_argument naming `who`.
void check_durations(const char* who, const PipeSpec& spec,
                     const std::vector<std::vector<double>>& durations) {
  if (int(durations.size()) != spec.stages)
    throw std::invalid_argument(std::string(who) + ": one duration list per stage");
  const int64_t n = stage_action_count(spec);
  for (const auto& d : durations)
    if (int64_t(d.size()) != n)
      throw std::invalid_argument(std::string(who) + ": " + std::to_string(d.size()) +
                                  " durations for a table of " + std::to_string(n) + " actions");
}

}  // namespace

PipeSimulation replay(const PipeSpec& spec, const std::vector<std::vector<double>>& durations) {
  check_durations("replay", spec, durations);
  return run_clock(spec,
                   [&](int s, size_t i, const PipeAction&) { return durations[size_t(s)][i]; });
}

std::vector<PipeCosts> mean_costs(const PipeSpec& spec,
                                  const std::vector<std::vector<double>>& durations) {
  check_durations("mean_costs", spec, durations);
  const size_t G = size_t(spec.virtual_stages());
  std::vector<PipeCosts> sum(G, PipeCosts{0.0, 0.0, 0.0});
  std::vector<std::array<int64_t, 3>> count(G, {0, 0, 0});  // F, B or BW, W
  for (int s = 0; s < spec.stages; ++s) {
    const auto& d = durations[size_t(s)];
    const std::vector<PipeAction> actions = stage_actions(spec, s);
    for (size_t i = 0; i < actions.size(); ++i) {
      const size_t g = size_t(spec.virtual_stage(s, actions[i].chunk));
      switch (actions[i].op) {
        case PipeOp::F: sum[g].f += d[i]; ++count[g][0]; break;
        case PipeOp::BW:
        case PipeOp::B: sum[g].b += d[i]; ++count[g][1]; break;
        case PipeOp::W: sum[g].w += d[i]; ++count[g][2]; break;
      }
    }
  }
  for (size_t g = 0; g < G; ++g) {
    if (count[g][0] > 0) sum[g].f /= double(count[g][0]);
    if (count[g][1] > 0) sum[g].b /= double(count[g][1]);
    if (count[g][2] > 0) sum[g].w /= double(count[g][2]);
  }
  return sum;
}

double bubble_theory(const PipeSpec& spec, double f, double b, double w) {
  const double p = spec.stages, M = spec.micro_batches;
  double idle = (p - 1) * (f + b + w);
  if (spec.schedule == PipeSchedule::interleaved) idle /= double(spec.chunks);
  if (spec.schedule == PipeSchedule::zb_h1) idle = (p - 1) * std::max(f + b - w, 0.0);
  const double work = M * (f + b + w);
  return idle + work > 0 ? idle / (idle + work) : 0.0;
}

}  // namespace hlp::parallel
