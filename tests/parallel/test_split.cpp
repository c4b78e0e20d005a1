// Pipeline stage splits (stage_split.h): balanced beats uniform on uneven layer costs and is the
// exact min-max partition; params balances trainable parameters; explicit lists are honoured;
// impossible splits are user errors.
#include "catch_compat.h"

#include <algorithm>
#include <functional>

#include "common/error.h"
#include "model/accounting.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "parallel/stage_split.h"

using namespace hlp;
using parallel::split_stages;

namespace {

model::ModelConfig small(const std::string& pattern = "") {
  return model::resolve_model_config("small", pattern, "chunked");
}

model::LoraConfig lora8() { return model::make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj"); }

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// Smallest possible largest-stage sum over every contiguous split into p non-empty stages.
double brute_force_min_max(const std::vector<double>& w, int p) {
  const int64_t L = int64_t(w.size()) - 2;
  double best = 1e300;
  std::vector<int64_t> first{0};
  std::function<void(int64_t)> rec = [&](int64_t from) {
    if (int(first.size()) == p) {
      best = std::min(best, max_of(parallel::stage_sums(w, first)));
      return;
    }
    for (int64_t b = from; b < L; ++b) {
      first.push_back(b);
      rec(b + 1);
      first.pop_back();
    }
  };
  rec(1);
  return best;
}

}  // namespace

TEST_CASE("split: balanced has a lower max/mean stage cost than uniform for uneven costs",
          "[split]") {
  // small at T 256: never worse than uniform (here uniform happens to be optimal already).
  for (int p : {2, 3, 4}) {
    INFO("pp " << p);
    auto uniform = split_stages(small(), lora8(), 256, p, "uniform");
    auto balanced = split_stages(small(), lora8(), 256, p, "balanced");
    CHECK(balanced.max_over_mean_cost() <= uniform.max_over_mean_cost());
  }
  // A pattern whose attention layers (long sequence) all sit at the end.
  auto cfg = small("GGGGGGGGAAAA");
  auto uniform = split_stages(cfg, lora8(), 2048, 2, "uniform");
  auto balanced = split_stages(cfg, lora8(), 2048, 2, "balanced");
  CHECK(uniform.first_block == std::vector<int64_t>{0, 6});
  CHECK(balanced.first_block[1] > 6);  // the attention half is more expensive: move the cut
  CHECK(balanced.max_over_mean_cost() < uniform.max_over_mean_cost());
}

TEST_CASE("split: balanced is the exact min-max partition of the layer costs", "[split]") {
  for (const char* pattern : {"GGGGGGAGGASG", "AGSAGGGSAAG", "GAGS"}) {
    auto cfg = small(pattern);
    const auto costs = model::layer_costs(cfg, lora8(), 512);
    for (int p = 1; p <= std::min<int>(4, int(cfg.num_layers())); ++p) {
      INFO(pattern << " pp " << p);
      auto s = split_stages(cfg, lora8(), 512, p, "balanced");
      CHECK(max_of(s.stage_cost) == Approx(brute_force_min_max(costs, p)).epsilon(1e-12));
      // stages cover all blocks, in order, none empty
      CHECK(s.first_block.front() == 0);
      CHECK(s.end_block.back() == cfg.num_layers());
      for (int i = 0; i < p; ++i) CHECK(s.end_block[size_t(i)] > s.first_block[size_t(i)]);
    }
  }
}

TEST_CASE("split: params balances trainable parameters (DeepSpeed's `parameters`)", "[split]") {
  auto cfg = small("GGGGGGAGGASG");
  const auto counts = model::count_parameters(cfg, lora8());
  std::vector<double> w(counts.per_layer_trainable.begin(), counts.per_layer_trainable.end());
  for (int p : {2, 3, 4}) {
    auto params = split_stages(cfg, lora8(), 256, p, "params");
    auto uniform = split_stages(cfg, lora8(), 256, p, "uniform");
    CHECK(max_of(parallel::stage_sums(w, params.first_block)) == brute_force_min_max(w, p));
    CHECK(max_of(parallel::stage_sums(w, params.first_block)) <=
          max_of(parallel::stage_sums(w, uniform.first_block)));
  }
}

TEST_CASE("split: uniform and explicit splits are honoured", "[split]") {
  auto u = split_stages(small(), lora8(), 256, 5, "uniform");  // 12 = 3 + 3 + 2 + 2 + 2
  CHECK(u.first_block == std::vector<int64_t>{0, 3, 6, 8, 10});
  CHECK(u.end_block == std::vector<int64_t>{3, 6, 8, 10, 12});
  auto e = split_stages(small(), lora8(), 256, 3, "0,5,9");
  CHECK(e.first_block == std::vector<int64_t>{0, 5, 9});
  CHECK(e.end_block == std::vector<int64_t>{5, 9, 12});
  CHECK(e.method == "0,5,9");
  const auto costs = model::layer_costs(small(), lora8(), 256);
  double total = 0;
  for (double c : costs) total += c;
  CHECK(e.stage_cost[0] + e.stage_cost[1] + e.stage_cost[2] == Approx(total));
}

TEST_CASE("split: impossible splits are user errors", "[split]") {
  auto tiny = model::resolve_model_config("tiny", "", "chunked");  // 4 layers
  auto l = lora8();
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 5, "uniform"), UserError);   // more stages than layers
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 5, "balanced"), UserError);
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 2, "0,0"), UserError);       // empty stage
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 3, "0,2,1"), UserError);     // not increasing
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 2, "1,3"), UserError);       // does not start at 0
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 2, "0,4"), UserError);       // past the last layer
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 3, "0,2"), UserError);       // wrong stage count
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 2, "0,x"), UserError);
  CHECK_THROWS_AS(split_stages(tiny, l, 32, 2, "even"), UserError);      // unknown method
  try {
    split_stages(tiny, l, 32, 5, "uniform");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("more pipeline stages than the model has layers") !=
          std::string::npos);
  }
}
