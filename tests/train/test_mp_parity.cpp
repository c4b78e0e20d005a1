// Pipeline and tensor parallelism (and their compositions with data parallelism) reproduce the
// single-process loss trajectory: same seed, same global batch, tiny model, 5 steps, 1e-5
// relative in float32, with LoRA and with full finetuning (which also trains the tied
// embedding that the first and last pipeline stages share).
// At 2 ranks: pp2 x {gpipe, 1f1b} x {uniform, balanced}, tp2.
// At 4 ranks: pp4 x {gpipe, 1f1b} x {uniform, balanced}, dp2 x pp2, dp2 x tp2, tp2 x pp2.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "common/error.h"
#include "data/tokenizer.h"
#include "model/hf/config_json.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "train/trainer.h"
#include "parity_check.h"
#include "train_test_util.h"

using namespace hlp;

namespace {

// Losses and gradient norms of a run (the norm is collective over tp and pp: checks it too).
struct Trajectory {
  std::vector<double> losses, grad_norms;
  int64_t tokens_local = 0;  // of the last step
  train::TrainOutcome outcome;
};

Trajectory run(const train::TrainConfig& c, std::shared_ptr<comm::Communicator> comm) {
  Trajectory t;
  train::TrainHooks hooks;
  hooks.on_step = [&](const train::StepReport& r, parallel::Strategy&) {
    t.grad_norms.push_back(r.grad_norm);
    t.tokens_local = r.tokens_local;
  };
  t.outcome = train::train(c, comm, hooks);
  t.losses = t.outcome.losses;
  return t;
}

const Trajectory& reference(int lora_rank) {
  static std::map<int, Trajectory> cache;
  auto it = cache.find(lora_rank);
  if (it == cache.end()) {
    auto t = run(test::tiny_config("single", lora_rank), test::self());
    REQUIRE(t.losses.back() < t.losses.front());  // the loss must move, or parity proves nothing
    it = cache.emplace(lora_rank, t).first;
  }
  return it->second;
}

// The lean kernels' run of this binary (HLP_TEST_KERNELS=lean, tests/train/CMakeLists.txt).
bool lean_kernels() { return std::getenv("HLP_TEST_KERNELS") != nullptr; }

// The transformers 5 Qwen3-Next MoE fixture and LoRA on every projection it has (the suffixes
// reach each expert's and the shared expert's gate / up / down_proj).
std::string moe_fixture() {
  return test::source_dir() + "/tests/hf/transformers5/fixtures/qwen3_next_moe_a";
}
constexpr const char* kMoeProjections =
    "in_proj_qkvz,in_proj_ba,out_proj,q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";

// Losses within loss_rel_tol (kParityRelTol unless the test says why not), gradient norms 1e-4.
void check_parity(const Trajectory& got, const Trajectory& want,
                  double loss_rel_tol = test::kParityRelTol) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i << ": got " << got.losses[i] << " want " << want.losses[i]);
    CHECK(std::abs(got.losses[i] - want.losses[i]) <= loss_rel_tol * std::abs(want.losses[i]));
  }
  REQUIRE(got.grad_norms.size() == want.grad_norms.size());
  for (size_t i = 0; i < got.grad_norms.size(); ++i) {
    INFO("grad norm, step " << i << ": got " << got.grad_norms[i] << " want "
                            << want.grad_norms[i]);
    CHECK(std::abs(got.grad_norms[i] - want.grad_norms[i]) <= 1e-4 * want.grad_norms[i]);
  }
}

train::TrainConfig mp_config(const std::string& strategy, int lora_rank, int pp, int tp) {
  auto c = test::tiny_config(strategy, lora_rank);
  c.pp = pp;
  c.tp = tp;
  return c;
}

}  // namespace

TEST_CASE("pipeline: pp = world size reproduces single for every schedule and split",
          "[parity][pp]") {
  const int n = test::world()->size();
  for (int lora_rank : {8, 0})
    for (const char* schedule : {"gpipe", "1f1b"})
      for (const char* split : {"uniform", "balanced"}) {
        SECTION("pp" + std::to_string(n) + " " + schedule + " " + split + " lora_rank " +
                std::to_string(lora_rank)) {
          auto c = mp_config("pp", lora_rank, n, 1);
          c.pp_schedule = hlp::parallel::parse_pipe_schedule(schedule);
          c.pp_split = split;
          auto t = run(c, test::world());
          check_parity(t, reference(lora_rank));
          const auto& o = t.outcome;
          REQUIRE(o.pipeline.has_value());
          CHECK(o.pipeline->stage_first_layer.size() == size_t(n));
          CHECK(o.pipeline->stage_first_layer.front() == 0);
          CHECK(o.pipeline->micro_batches == 4);  // G 8 / B 2
          CHECK(o.pipeline->bubble_fraction_theory == Approx(double(n - 1) / (4 + n - 1)));
          CHECK(o.pipeline->schedule == schedule);
          for (double s : o.pipeline->stage_cost_measured_s) CHECK(s > 0);
          REQUIRE(o.pipeline->stage_cpu_measured_s.size() == size_t(n));
          for (size_t s = 0; s < size_t(n); ++s) {  // thread CPU time <= wall time (+ clock slack)
            CHECK(o.pipeline->stage_cpu_measured_s[s] > 0);
            CHECK(o.pipeline->stage_cpu_measured_s[s] <= o.pipeline->stage_cost_measured_s[s] * 1.05 + 1e-3);
          }
          // parameters: this stage only; over all stages the whole model plus the last
          // stage's copy of the tied embedding [V, D]
          CHECK(o.held.param_bytes < 4 * o.params_total);
          at::Tensor bytes = at::full({1}, o.held.param_bytes, at::kLong);
          test::world()->all_reduce(bytes, comm::ReduceOp::Sum);
          const int64_t V = data::make_tokenizer("byte")->vocab_size(), D = 64;
          CHECK(bytes.item<int64_t>() == 4 * (o.params_total + V * D));
        }
      }
}

TEST_CASE("pipeline: an explicit split is honoured in the run", "[pp]") {
  const int n = test::world()->size();
  auto c = mp_config("pp", 8, n, 1);
  c.pp_split = n == 2 ? "0,3" : "0,1,2,3";
  c.steps = 2;
  auto o = train::train(c, test::world());
  REQUIRE(o.pipeline.has_value());
  CHECK(o.pipeline->stage_first_layer ==
        (n == 2 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{0, 1, 2, 3}));
  CHECK(o.pipeline->split == c.pp_split);
}

TEST_CASE("pipeline: the profiled split measures layer kinds and still matches single",
          "[pp]") {
  const int n = test::world()->size();
  auto c = mp_config("pp", 8, n, 1);
  c.pp_split = "profiled";
  auto t = run(c, test::world());
  check_parity(t, reference(8));
  REQUIRE(t.outcome.pipeline.has_value());
  const auto& p = *t.outcome.pipeline;
  CHECK(p.split == "profiled");
  REQUIRE(p.stage_first_layer.size() == size_t(n));
  for (int s = 1; s < n; ++s) CHECK(p.stage_first_layer[size_t(s)] > p.stage_first_layer[size_t(s - 1)]);
  for (double cost : p.stage_cost) CHECK(cost > 0);  // seconds, measured
}

TEST_CASE("tensor parallel and compositions reproduce single", "[parity][tp]") {
  const int n = test::world()->size();
  struct Case {
    const char* strategy;
    int pp, tp;
  };
  std::vector<Case> cases;
  if (n == 2) cases = {{"tp", 1, 2}};
  if (n == 4)
    cases = {{"ddp", 2, 1}, {"ddp", 1, 2}, {"pp", 2, 2}, {"tp", 2, 2}, {"fsdp2", 2, 1},
             {"fsdp2", 1, 2}};
  for (int lora_rank : {8, 0})
    for (const auto& k : cases) {
      SECTION(std::string(k.strategy) + " pp" + std::to_string(k.pp) + " tp" +
              std::to_string(k.tp) + " lora_rank " + std::to_string(lora_rank)) {
        auto c = mp_config(k.strategy, lora_rank, k.pp, k.tp);
        auto t = run(c, test::world());
        check_parity(t, reference(lora_rank));
        if (std::string(k.strategy) == "fsdp2") {  // the stage really is sharded over dp
          auto replicated = train::train(mp_config("ddp", lora_rank, k.pp, k.tp), test::world());
          CHECK(t.outcome.held.param_bytes < replicated.held.param_bytes);
          CHECK(t.outcome.held.grad_bytes < replicated.held.grad_bytes);
          CHECK(t.outcome.optimizer_bytes < replicated.optimizer_bytes);
        }
      }
    }
}

TEST_CASE("tensor parallel: partners with different batches are detected", "[tp]") {
  auto mesh = std::make_shared<parallel::Mesh>(test::world(), /*tp=*/2, /*pp=*/1);
  parallel::StrategyOptions so;
  so.strategy = parallel::StrategyKind::tp;
  so.model = model::resolve_model_config("tiny", "", "chunked").with_vocab(258);
  so.lora = model::make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj");
  so.mesh = mesh;
  so.dp_comm = mesh->dp_comm();
  so.seq_len = 16;
  auto strategy = parallel::make_strategy(so);
  // rank-dependent tokens: tp partners disagree
  auto tokens = torch::full({2, 16}, 3 + test::world()->rank(), torch::kLong);
  std::vector<parallel::MicroBatch> mbs{{tokens, tokens}};
  parallel::PhaseTimes times;
  CHECK_THROWS_AS(strategy->forward_backward(mbs, 0, times), UserError);
}

TEST_CASE("model-parallel configurations that cannot run are user errors, pp/tp defaults", "[pp][tp]") {
  const int n = test::world()->size();
  // --strategy pp / tp without --pp / --tp put every rank on that axis (not an error)
  CHECK(train::with_parallel_defaults(mp_config("pp", 8, 1, 1), n).pp == n);
  CHECK(train::with_parallel_defaults(mp_config("tp", 8, 1, 1), n).tp == n);
  CHECK(train::with_parallel_defaults(mp_config("ddp", 8, 1, 1), n).pp == 1);
  CHECK_THROWS_AS(train::train(mp_config("fsdp", 8, n, 1), test::world()), UserError);
  auto c = mp_config("pp", 8, n, 1);
  c.pp_split = "0,0,0,0";
  CHECK_THROWS_AS(train::train(c, test::world()), UserError);
}

// Benchmark, not run by ctest (hidden tag): mpiexec -n 2|4 bin/test_mp_parity "[bench]"
// small model (or its Jet-like 28-layer pattern), LoRA r8, T 128, micro-batch 1, 1f1b, 5 steps.
// Stage max/mean: wall = compute wall time (inflated when ranks share cores), cpu = compute
// thread CPU time (the work itself), model = the split's predicted cost.
TEST_CASE("pipeline benchmark: bubble vs theory, uniform vs balanced", "[.][bench]") {
  const int n = test::world()->size();
  const bool root = test::world()->rank() == 0;
  auto run = [&](const std::string& pattern, const std::string& split, int m, const char* sched) {
    auto c = mp_config("pp", 8, n, 1);
    c.model = "small";
    c.pattern = pattern;
    c.seq_len = 128;
    c.micro_batch = 1;
    c.global_batch = m;
    c.steps = 5;
    c.pp_split = split;
    c.pp_schedule = hlp::parallel::parse_pipe_schedule(sched);
    std::vector<double> step_s;
    train::TrainHooks hooks;
    hooks.on_step = [&](const train::StepReport& r, parallel::Strategy&) {
      step_s.push_back(r.step_time_s);
    };
    auto o = train::train(c, test::world(), hooks);
    std::sort(step_s.begin() + 1, step_s.end());
    const double t = step_s[1 + (step_s.size() - 1) / 2];  // median after the first step
    const auto& p = *o.pipeline;
    if (root) {
      std::string firsts;
      for (auto f : p.stage_first_layer) firsts += std::to_string(f) + " ";
      std::printf("pp%d %-5s %-9s m=%d first=[%s] tokens/s %.0f  held %.1f MiB/rank  "
                  "bubble %.3f (theory %.3f)  stage max/mean: wall %.3f cpu %.3f model %.3f\n",
                  n, sched, split.c_str(), m, firsts.c_str(), m * 128 / t,
                  (o.held.param_bytes + o.held.grad_bytes + o.optimizer_bytes) / 1048576.0,
                  p.bubble_fraction, p.bubble_fraction_theory,
                  parallel::max_over_mean(p.stage_cost_measured_s),
                  parallel::max_over_mean(p.stage_cpu_measured_s),
                  parallel::max_over_mean(p.stage_cost));
      std::fflush(stdout);
    }
  };
  for (int m : {1, 2, 4, 8}) run("", "uniform", m, "1f1b");
  for (int m : {1, 4}) run("", "uniform", m, "gpipe");
  for (const char* pattern : {"", "GGGGGGGGGGGGGGAGGGGASSGGGGGG"})
    for (const char* split : {"uniform", "balanced", "profiled"}) run(pattern, split, 4, "1f1b");
}

TEST_CASE("tensor parallel: the JetBlock layers of small (dynamic conv kernel generator) shard "
          "correctly", "[parity][tp]") {
  if (test::world()->size() != 2) return;  // tp2 only
  for (int lora_rank : {8, 0}) {
    auto c = test::tiny_config("single", lora_rank);
    c.model = "small";  // JetBlock G layers: kernel_generator.w1 replicated, .w2 column-parallel
    c.seq_len = 16;
    c.global_batch = 2;
    c.micro_batch = 1;
    c.steps = 3;
    c.lora_targets = "all-linear";  // adapters on every projection, w1 and w2 included
    auto want = run(c, test::self());
    REQUIRE(want.losses.back() < want.losses.front());
    c.strategy = hlp::parallel::StrategyKind::tp;
    c.tp = 2;
    INFO("lora_rank " << lora_rank);
    // Full finetuning: 3e-5. tp2's row-parallel sums add the halves in another order, and the
    // step-1 gradient already differs from single's by ~3e-5 relative (grad norm 18.1342 vs
    // 18.1337 with LibTorch 1.13 and with 2.14, lean kernels; checked at 1e-4 below). Adam turns
    // that into the step-2 loss: 7.3e-6 relative with 1.13, 1.57e-5 with 2.14 (Debian sid, whose
    // kernels round differently), over kParityRelTol. LoRA (fewer, smaller updates): 3e-6.
    check_parity(run(c, test::world()), want, lora_rank == 0 ? 3e-5 : test::kParityRelTol);
  }
}

// Issue 26: the interleaved 1F1B (V = 2 chunks per stage, on an 8-block pattern so that p = 4
// has p V = 8 chunks) and zero bubble H1 (backward split into B and W) schedules reproduce
// single within the same bounds, with LoRA (W: the adapters only) and full finetuning (W: every
// weight, the tied embedding included).
TEST_CASE("pipeline: interleaved and zb-h1 schedules reproduce single", "[parity][pp]") {
  const int n = test::world()->size();
  const std::string pattern = "GASGGASG";
  static std::map<int, Trajectory> references;
  for (int lora_rank : {8, 0})
    for (const char* schedule : {"interleaved", "zb-h1"}) {
      SECTION("pp" + std::to_string(n) + " " + schedule + " lora_rank " +
              std::to_string(lora_rank)) {
        if (!references.count(lora_rank)) {
          auto single = test::tiny_config("single", lora_rank);
          single.pattern = pattern;
          references[lora_rank] = run(single, test::self());
          REQUIRE(references[lora_rank].losses.back() < references[lora_rank].losses.front());
        }
        auto c = mp_config("pp", lora_rank, n, 1);
        c.pattern = pattern;
        c.pp_schedule = hlp::parallel::parse_pipe_schedule(schedule);
        const int V = std::string(schedule) == "interleaved" ? 2 : 1;
        c.pp_virtual = V;
        c.pp_split = "uniform";
        auto t = run(c, test::world());
        check_parity(t, references[lora_rank]);
        const auto& o = t.outcome;
        REQUIRE(o.pipeline.has_value());
        CHECK(o.pipeline->schedule == schedule);
        CHECK(o.pipeline->virtual_chunks == V);
        REQUIRE(o.pipeline->stage_first_layer.size() == size_t(n * V));  // every virtual stage
        for (int g = 0; g < n * V; ++g)  // uniform: 8 blocks in n V equal chunks
          CHECK(o.pipeline->stage_first_layer[size_t(g)] == g * 8 / (n * V));
        const double M = 4;  // G 8 / B 2
        if (V > 1) {
          const double idle = double(n - 1) / V;
          CHECK(o.pipeline->bubble_fraction_theory == Approx(idle / (idle + M)));
        } else {  // zero bubble: below 1F1B's (p - 1) / (M + p - 1), at least 0
          // The theory is (p - 1) max(F + B - W, 0) / (that + M (F + B + W)) at the run's own
          // measured micro-batch costs: where a descheduled W phase measures longer than F + B
          // (a loaded machine: a trixie suite at nice 19 beside two builds, 2026-11-27) it is 0,
          // legitimately. A check of measured times must not need an idle machine.
          CHECK(o.pipeline->bubble_fraction_theory < double(n - 1) / (M + n - 1));
          CHECK(o.pipeline->bubble_fraction_theory >= 0);
        }
        for (double s : o.pipeline->stage_cost_measured_s) CHECK(s > 0);
      }
    }
}

// The new schedules inside the compositions: data parallelism (ddp, fsdp2) and tensor
// parallelism over the pipeline axis (4 ranks).
TEST_CASE("pipeline: interleaved and zb-h1 compose with ddp and fsdp2 and tp", "[parity][pp]") {
  if (test::world()->size() != 4) return;
  const std::string pattern = "GASGGASG";
  struct Case {
    const char* strategy;
    int tp;
    const char* schedule;
  };
  for (int lora_rank : {8, 0}) {
    auto single = test::tiny_config("single", lora_rank);
    single.pattern = pattern;
    const Trajectory want = run(single, test::self());
    for (const Case& k : {Case{"ddp", 1, "interleaved"}, Case{"fsdp2", 1, "zb-h1"},
                          Case{"pp", 2, "interleaved"}, Case{"pp", 2, "zb-h1"}}) {
      SECTION(std::string(k.strategy) + " pp2 tp" + std::to_string(k.tp) + " " + k.schedule +
              " lora_rank " + std::to_string(lora_rank)) {
        auto c = mp_config(k.strategy, lora_rank, 2, k.tp);
        c.pattern = pattern;
        c.pp_schedule = hlp::parallel::parse_pipe_schedule(k.schedule);
        c.pp_virtual = std::string(k.schedule) == "interleaved" ? 2 : 1;
        check_parity(run(c, test::world()), want);
      }
    }
  }
}

TEST_CASE("pipeline: schedule combinations that cannot run end with a user error", "[pp]") {
  const int n = test::world()->size();
  auto c = mp_config("pp", 8, n, 1);
  c.steps = 1;
  c.pp_schedule = hlp::parallel::PipeSchedule::interleaved;
  c.pp_virtual = 1;  // interleaved needs V >= 2
  CHECK_THROWS_AS(train::train(c, test::world()), UserError);
  c.pp_schedule = hlp::parallel::PipeSchedule::zb_h1;
  c.activation_checkpointing = true;  // B would run the recompute's fused backward
  CHECK_THROWS_AS(train::train(c, test::world()), UserError);
}

// Issue 25: context parallelism. Every sequence is split along T over the cp ranks (tiny's G A S
// pattern: the delta-rule state passed between ranks, the short-convolution and window halos,
// ring attention), the loss and gradients reproduce single within the same bounds; both
// layouts, LoRA and full finetuning; at 4 ranks also cp x ddp, cp x fsdp2 and cp x tp.
TEST_CASE("context parallel reproduces single", "[parity][cp]") {
  const int n = test::world()->size();
  // the G layers' state by the chain (every case) and by the allgather scheme (cp over every
  // rank, with ddp and, in one layout, fsdp2 at 4 ranks); the all-to-all schemes (heads
  // re-sharded: tiny's 2 G heads and 4 / 2 attention heads over cp 2) alone and with ddp and
  // fsdp2, G and attention alike and one mixed (the cp 4 all-to-all runs: the Qwen3.5 and small
  // cases below); the lean kernels' run leaves the 4-rank all-to-all compositions out (they
  // change the layers' kernels, not the exchange; CI time)
  const bool lean = lean_kernels();
  struct Case {
    const char* strategy;
    int cp, tp;
    const char* scheme = "chain";
    const char* attention = "ring";
    const char* only_layout = nullptr;  // the one layout it runs in (nullptr: both)
  };
  std::vector<Case> cases{{"cp", n, 1}, {"cp", n, 1, "allgather"}};
  if (n == 2)
    cases.insert(cases.end(), {{"cp", 2, 1, "alltoall", "alltoall"},
                               {"cp", 2, 1, "allgather", "alltoall"}});
  if (n == 4)
    cases.insert(cases.end(), {{"ddp", 2, 1}, {"fsdp2", 2, 1}, {"tp", 2, 2},
                               {"ddp", 2, 1, "allgather"},
                               {"fsdp2", 2, 1, "allgather", "ring", "contiguous"}});
  // (one layout each: the two compositions cover both; CI time)
  if (n == 4 && !lean)
    cases.insert(cases.end(), {{"ddp", 2, 1, "alltoall", "alltoall", "zigzag"},
                               {"fsdp2", 2, 1, "alltoall", "alltoall", "contiguous"}});
  for (int lora_rank : {8, 0})
    for (const auto& k : cases)
      for (const char* layout : {"zigzag", "contiguous"}) {
        if (k.only_layout && std::string(k.only_layout) != layout) continue;
        SECTION(std::string(k.strategy) + " cp" + std::to_string(k.cp) + " tp" +
                std::to_string(k.tp) + " " + layout + " " + k.scheme + " " + k.attention +
                " lora_rank " + std::to_string(lora_rank)) {
          auto c = mp_config(k.strategy, lora_rank, 1, k.tp);
          c.cp = k.cp;
          c.cp_layout = hlp::parallel::parse_cp_layout(layout);
          c.cp_scheme = hlp::parallel::parse_cp_scheme(k.scheme);
          c.cp_attention = hlp::parallel::parse_cp_attention(k.attention);
          auto t = run(c, test::world());
          check_parity(t, reference(lora_rank));
          // each rank computed T / cp tokens of its rows
          CHECK(t.tokens_local * k.cp * (n / (k.cp * k.tp)) == int64_t(c.global_batch) * c.seq_len);
        }
      }
}

TEST_CASE("context parallel with activation checkpointing reproduces single", "[parity][cp]") {
  // the recomputed blocks exchange their halos, states and ring blocks again, in backward
  for (int lora_rank : {8, 0}) {
    auto c = mp_config("cp", lora_rank, 1, 1);
    c.activation_checkpointing = true;
    INFO("lora_rank " << lora_rank);
    check_parity(run(c, test::world()), reference(lora_rank));
  }
}

TEST_CASE("context parallel: small (JetBlock dynamic convolution, hybrid pattern) reproduces "
          "single", "[parity][cp]") {
  const int n = test::world()->size();
  for (int lora_rank : {8, 0}) {
    auto c = test::tiny_config("single", lora_rank);
    c.model = "small";  // GGGGGGAGGASG, JetBlock G layers; window 256 > T: the S layer sees all
    c.seq_len = 64;
    c.global_batch = 2;
    c.micro_batch = 1;
    c.steps = 5;
    // AdamW turns the last bits of a near-zero gradient into a whole step: at lr 5e-3 the
    // 12-layer model's summation-order differences (the transition algebra) reach 1.07e-5
    // relative by step 3 (measured), at 1e-3 about 2e-6 by step 5 (measured, cp 2 and 4)
    c.lr = 1e-3;
    c.lora_targets = "all-linear";
    auto want = run(c, test::self());
    REQUIRE(want.losses.back() < want.losses.front());
    c.strategy = hlp::parallel::StrategyKind::cp;
    c.cp = n;
    INFO("lora_rank " << lora_rank);
    check_parity(run(c, test::world()), want);
    // the all-to-all schemes: small's 4 G heads and 4 query heads divide over cp 2 and 4 (its
    // 2 KV heads repeated twice at cp 4), in the contiguous layout (zigzag at cp 4: the Qwen3.5
    // case); not again with the lean kernels (CI time)
    if (lean_kernels()) continue;
    c.cp_scheme = hlp::parallel::CpScheme::alltoall;
    c.cp_attention = hlp::parallel::CpAttention::alltoall;
    c.cp_layout = hlp::parallel::CpLayout::contiguous;
    INFO("alltoall, contiguous");
    check_parity(run(c, test::world()), want);
  }
}

TEST_CASE("Qwen3.5 and Qwen3-Next (transformers' layers) reproduce single under every strategy",
          "[parity][qwen3_5]") {
  // the committed transformers 5.12 fixtures' shapes: qwen3_5_text_a (4 layers GAGG: Gated
  // DeltaNet with 2 key / 4 value heads, conv width 3; gated attention with q_norm / k_norm,
  // rotary over half a head) and qwen3_next_dense (GAGA, in_proj_qkvz / in_proj_ba fused per key
  // head, 2 key / 6 value heads); random weights from the seed (no --init-from, so flat fsdp
  // runs too); LoRA on every projection by its Hugging Face name, and full finetuning
  const int n = test::world()->size();
  // tp 2 keeps key head t's q, k and value heads t's v of in_proj_qkv / conv1d (both fixtures:
  // 2 key heads, 4 attention heads, 2 KV heads)
  struct Case {
    const char* strategy;
    int pp, cp, tp;
    const char* cp_scheme = "chain";
  };
  std::vector<Case> cases;
  if (n == 2)
    cases = {{"ddp", 1, 1, 1}, {"fsdp", 1, 1, 1}, {"fsdp2", 1, 1, 1}, {"pp", 2, 1, 1},
             {"cp", 1, 2, 1}, {"tp", 1, 1, 2}, {"cp", 1, 2, 1, "allgather"},
             {"cp", 1, 2, 1, "alltoall"}};
  if (n == 4)
    cases = {{"fsdp2", 2, 1, 1}, {"ddp", 1, 2, 1}, {"fsdp2", 1, 2, 1}, {"pp", 4, 1, 1},
             {"cp", 1, 4, 1}, {"pp", 2, 1, 2}, {"fsdp2", 1, 1, 2}, {"cp", 1, 4, 1, "allgather"},
             {"cp", 1, 4, 1, "alltoall"}};
  for (const char* fixture : {"qwen3_5_text_a", "qwen3_next_dense"})
  for (int lora_rank : {8, 0}) {
    auto c = test::tiny_config("single", lora_rank);
    c.model_config = test::source_dir() + "/tests/hf/transformers5/fixtures/" + fixture;
    c.lora_targets = "in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,in_proj_qkvz,in_proj_ba,out_proj,"
                     "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
    c.lr = 1e-3;
    const auto want = run(c, test::self());
    REQUIRE(want.losses.back() < want.losses.front());
    for (const auto& k : cases) {
      const bool heads = std::string(k.cp_scheme) == "alltoall";
      // alltoall (G and attention layers re-sharded to heads): qwen3_next_dense's 6 value heads
      // do not divide over cp 4 (hlp-train refuses it)
      if (heads && k.cp == 4 && std::string(fixture) == "qwen3_next_dense") continue;
      SECTION(std::string(fixture) + " " + k.strategy + " pp" + std::to_string(k.pp) + " cp" +
              std::to_string(k.cp) + " " + k.cp_scheme + " tp" + std::to_string(k.tp) +
              " lora_rank " + std::to_string(lora_rank)) {
        auto m = c;
        m.strategy = hlp::parallel::parse_strategy(k.strategy);
        m.pp = k.pp;
        m.cp = k.cp;
        m.tp = k.tp;
        m.cp_scheme = hlp::parallel::parse_cp_scheme(k.cp_scheme);
        if (heads) m.cp_attention = hlp::parallel::CpAttention::alltoall;
        check_parity(run(m, test::world()), want);
      }
    }
  }
}

TEST_CASE("Qwen3-Next with sparse MoE layers reproduces single under every strategy that runs "
          "it; the load-balancing loss under data parallelism", "[parity][moe]") {
  // the committed fixture qwen3_next_moe_a's shape (4 layers GAGA; layers 0, 2, 3 sparse: 8
  // experts of width 32, top 2 renormalised, a shared expert of 48; layer 1 dense), random
  // weights from the seed; LoRA on every projection (the suffixes reach each expert's and the
  // shared expert's gate/up/down_proj) and full finetuning; then the same with
  // output_router_logits true (loss = CE + 0.01 aux, moe.h) under ddp / fsdp / fsdp2.
  // Expert parallelism (ep > 1): each rank holds 8 / ep experts, the rows travel by all-to-all;
  // with ddp and fsdp2 underneath, inside dp (ep 2 x dp 2), beside pp and on the cp ranks. The
  // lean kernels change no MoE code: their run leaves the ep cases out (CI time).
  const bool lean = lean_kernels();
  const int n = test::world()->size();
  struct Case {
    const char* strategy;
    int pp, cp;
    bool aux;
    int ep = 1;
    bool checkpointing = false;  // the recomputed blocks exchange their rows again, in backward
  };
  std::vector<Case> cases;
  if (n == 2)
    cases = {{"ddp", 1, 1, false},      {"fsdp", 1, 1, false},     {"fsdp2", 1, 1, false},
             {"pp", 2, 1, false},       {"cp", 1, 2, false},       {"ddp", 1, 1, true},
             {"fsdp", 1, 1, true},      {"fsdp2", 1, 1, true},     {"ddp", 1, 1, false, 2},
             {"fsdp2", 1, 1, false, 2}, {"cp", 1, 2, false, 2},    {"ddp", 1, 1, true, 2},
             {"ddp", 1, 1, false, 2, true}};
  if (n == 4)  // ep 4 and ep 2 x dp 2 under ddp and fsdp2; ep x pp and ep x cp under each
    cases = {{"fsdp2", 2, 1, false},    {"ddp", 1, 2, false},      {"pp", 4, 1, false},
             {"cp", 1, 4, false},       {"ddp", 1, 1, true},       {"fsdp2", 1, 1, true},
             {"ddp", 1, 1, false, 4},   {"fsdp2", 1, 1, false, 4}, {"ddp", 1, 1, false, 2},
             {"fsdp2", 1, 1, false, 2}, {"pp", 2, 1, false, 2},    {"fsdp2", 2, 1, false, 2},
             {"ddp", 1, 2, false, 2},   {"fsdp2", 1, 2, false, 2}};
  const std::string fixture = moe_fixture();
  // the same config with output_router_logits true, in this rank's own directory
  const std::string aux_dir = std::filesystem::temp_directory_path().string() + "/hlp_moe_aux_" +
                              std::to_string(::getpid());
  std::filesystem::create_directories(aux_dir);
  {
    std::ifstream in(fixture + "/config.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string json = text.str();
    const std::string off = "\"output_router_logits\": false";
    REQUIRE(json.find(off) != std::string::npos);
    json.replace(json.find(off), off.size(), "\"output_router_logits\": true");
    std::ofstream(aux_dir + "/config.json") << json;
  }
  for (bool aux : {false, true})
  for (int lora_rank : {8, 0}) {
    auto c = test::tiny_config("single", lora_rank);
    c.model_config = aux ? aux_dir : fixture;
    c.lora_targets = kMoeProjections;
    c.lr = 1e-3;
    const auto want = run(c, test::self());
    REQUIRE(want.losses.back() < want.losses.front());
    for (const auto& k : cases) {
      if (k.aux != aux || (lean && k.ep > 1)) continue;
      SECTION(std::string(k.strategy) + " pp" + std::to_string(k.pp) + " cp" +
              std::to_string(k.cp) + " ep" + std::to_string(k.ep) + (aux ? " aux" : "") +
              (k.checkpointing ? " checkpointing" : "") + " lora_rank " +
              std::to_string(lora_rank)) {
        auto m = c;
        m.activation_checkpointing = k.checkpointing;
        m.strategy = hlp::parallel::parse_strategy(k.strategy);
        m.pp = k.pp;
        m.cp = k.cp;
        m.ep = k.ep;
        const auto got = run(m, test::world());
        check_parity(got, want);
        if (k.ep > 1) {  // the experts were split: the run says so, every rank exchanged rows
          REQUIRE(got.outcome.experts.has_value());
          CHECK(got.outcome.experts->ep == k.ep);
          REQUIRE(got.outcome.experts->all_to_all_bytes.size() == size_t(n));
          for (int64_t bytes : got.outcome.experts->all_to_all_bytes) CHECK(bytes > 0);
        }
        if (k.ep > 1 && std::string(k.strategy) == "ddp") {
          // the closed form of a replica's parameters: the whole model less the (E - E / ep)
          // routed experts of every sparse layer it does not hold, each 3 D I weights and, with
          // LoRA on gate / up / down_proj, 3 r (D + I) adapter elements
          const auto mc = model::hf::read_hf_config(fixture).config;
          const int64_t D = mc.hidden, I = mc.moe_hidden, E = mc.moe_experts;
          const int64_t per_expert = 3 * D * I + 3 * lora_rank * (D + I);
          CHECK(got.outcome.held.param_elements ==
                got.outcome.params_total - mc.count_moe_layers() * (E - E / k.ep) * per_expert);
        }
      }
    }
  }
  // what does not run yet: tp on MoE layers; pp and cp with the load-balancing loss
  auto c = test::tiny_config("tp", 8);
  c.model_config = fixture;
  c.tp = 2;
  CHECK_THROWS_WITH(train::train(c, test::world()),
                    Catch::Contains("--tp does not split mixture-of-experts layers"));
  c = test::tiny_config("pp", 8);
  c.model_config = aux_dir;
  c.pp = 2;
  CHECK_THROWS_WITH(train::train(c, test::world()),
                    Catch::Contains("--pp splits the sparse layers of a forward"));
  c = test::tiny_config("cp", 8);
  c.model_config = aux_dir;
  c.cp = 2;
  CHECK_THROWS_WITH(train::train(c, test::world()),
                    Catch::Contains("--cp splits the tokens of a forward"));
}

TEST_CASE("mixture of experts: LoRA on the router and the shared expert's gate trains them, "
          "with the experts split or not", "[parity][moe]") {
  // `gate` (the router, D -> E) and `shared_expert_gate` (D -> 1) take adapters beside every
  // projection: each sparse layer adds r (D + E) + r (D + 1) trainable elements, replicated on
  // every rank (they are not experts), and ddp / fsdp2 with --ep 2 follow single's losses.
  if (test::world()->size() != 2) return;
  const std::string fixture = moe_fixture();
  const std::string projections = kMoeProjections;
  auto c = test::tiny_config("single", 8);
  c.model_config = fixture;
  c.lora_targets = projections;
  c.lr = 1e-3;
  const auto plain = run(c, test::self());
  c.lora_targets = projections + ",gate,shared_expert_gate";
  const auto want = run(c, test::self());
  const auto mc = model::hf::read_hf_config(fixture).config;
  CHECK(want.outcome.params_trainable - plain.outcome.params_trainable ==
        mc.count_moe_layers() * 8 * ((mc.hidden + mc.moe_experts) + (mc.hidden + 1)));
  CHECK(want.losses != plain.losses);  // the router's adapters change the routing's gradients
  for (const char* strategy : {"ddp", "fsdp2"}) {
    SECTION(std::string(strategy) + " ep 2") {
      auto m = c;
      m.strategy = hlp::parallel::parse_strategy(strategy);
      m.ep = 2;
      check_parity(run(m, test::world()), want);
    }
  }
}

TEST_CASE("context parallel: configurations that cannot run end with a user error", "[cp]") {
  const int n = test::world()->size();
  auto c = mp_config("cp", 8, 1, 1);
  c.seq_len = 30;  // 30 tokens cannot be cut into 2 n equal pieces
  CHECK_THROWS_WITH(train::train(c, test::world()), Catch::Contains("--seq-len 30") &&
                                                        Catch::Contains("equal pieces"));
  if (n == 4) {
    auto d = mp_config("ddp", 8, 1, 1);
    d.cp = 3;
    CHECK_THROWS_WITH(train::train(d, test::world()), Catch::Contains("cp (3)"));
  }
}
