// Context parallelism, layer by layer, on real ranks (2 and 4): every layer kind run on this
// rank's pieces of the sequence under a ContextParallel shard gives the outputs, input gradients
// and (summed over the cp group) parameter gradients of the same layer run on the whole
// sequence, in float64 within 1e-10; and the bytes each exchange sends are the formulas of
// docs/strategies.md ("Context parallelism").
#include "catch_compat.h"

#include <cmath>
#include <string>

#include "comm/mpi_communicator.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/context_shard.h"
#include "model/gated_deltanet.h"
#include "parallel/context_parallel.h"

using namespace hlp;

namespace {

std::shared_ptr<comm::Communicator> world() {
  static std::shared_ptr<comm::Communicator> w = [] {
    int argc = 0;
    char** argv = nullptr;
    return std::shared_ptr<comm::Communicator>(comm::init_mpi_world(argc, argv));
  }();
  return w;
}

double max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-30);
  return (got - want).abs().max().item<double>() / scale;
}

struct LayerRun {
  torch::Tensor out, dx;
  std::vector<torch::Tensor> param_grads;
};

// Random float64 parameters, the same on every rank.
void randomise(torch::nn::Module& m) {
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.set_data(torch::randn(p.sizes(), torch::kFloat64) * 0.3);
}

LayerRun run_layer(torch::nn::Module& layer, const std::function<torch::Tensor(torch::Tensor)>& fwd,
                   const torch::Tensor& x, const torch::Tensor& w) {
  for (auto& p : layer.parameters()) p.mutable_grad() = torch::Tensor();
  auto xi = x.detach().clone().requires_grad_(true);
  auto out = fwd(xi);
  (out * w).sum().backward();
  LayerRun r{out.detach(), xi.grad(), {}};
  for (auto& p : layer.parameters())
    r.param_grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return r;
}

// Runs `layer` on the whole sequence and on this rank's pieces; checks the three parities.
// Returns this rank's exchange statistics of the cp run.
parallel::CpStats check_layer(torch::nn::Module& layer,
                              const std::function<torch::Tensor(torch::Tensor)>& fwd, int64_t T,
                              int64_t D, bool zigzag,
                              parallel::CpScheme scheme = parallel::CpScheme::chain,
                              parallel::CpAttention attention = parallel::CpAttention::ring) {
  torch::manual_seed(3);
  const int64_t B = 2;
  auto x = torch::randn({B, T, D}, torch::kFloat64);
  auto w = torch::randn({B, T, D}, torch::kFloat64);
  const auto want = run_layer(layer, fwd, x, w);
  parallel::ContextParallel cp(world(), T, zigzag, scheme, attention);
  const auto& l = cp.layout();
  LayerRun got;
  {
    model::ContextShardScope scope(&cp);
    got = run_layer(layer, fwd, l.slice(x), l.slice(w));
  }
  CHECK(max_rel(got.out, l.slice(want.out)) <= 1e-10);
  CHECK(max_rel(got.dx, l.slice(want.dx)) <= 1e-10);
  REQUIRE(got.param_grads.size() == want.param_grads.size());
  const auto names = layer.named_parameters();
  for (size_t i = 0; i < got.param_grads.size(); ++i) {
    INFO("parameter " << names[i].key());
    auto g = got.param_grads[i].clone();
    world()->all_reduce(g, comm::ReduceOp::Sum);
    CHECK(max_rel(g, want.param_grads[i]) <= 1e-10);
  }
  return cp.stats();
}

// Bytes all ranks of the group sent, per exchange kind and direction.
std::array<std::array<int64_t, 2>, size_t(parallel::CpExchange::count)> group_bytes(
    const parallel::CpStats& s) {
  auto t = torch::zeros({int64_t(parallel::CpExchange::count) * 2}, torch::kLong);
  for (size_t k = 0; k < size_t(parallel::CpExchange::count); ++k)
    for (size_t d = 0; d < 2; ++d) t[int64_t(k * 2 + d)] = s.bytes_sent[k][d];
  world()->all_reduce(t, comm::ReduceOp::Sum);
  std::array<std::array<int64_t, 2>, size_t(parallel::CpExchange::count)> out{};
  for (size_t k = 0; k < size_t(parallel::CpExchange::count); ++k)
    for (size_t d = 0; d < 2; ++d) out[k][d] = t[int64_t(k * 2 + d)].item<int64_t>();
  return out;
}

// Piece boundaries whose two sides live on different ranks: the messages a halo or the state
// chain needs (docs/strategies.md: cp - 1 contiguous, 2 cp - 2 zigzag).
int64_t crossing_boundaries(int cp, bool zigzag) { return zigzag ? 2 * cp - 2 : cp - 1; }

model::ModelConfig layer_config() {
  model::ModelConfig c;  // tiny: d 64
  c.window = 4;          // <= the shortest piece (T 32 / 8 at 4 ranks zigzag): one-piece halos
  return c;
}

constexpr int64_t kT = 32, kB = 2, kF64 = 8;

}  // namespace

TEST_CASE("context parallel: every G layer variant matches the whole sequence in float64",
          "[cp]") {
  const int p = world()->size();
  for (auto scheme :
       {parallel::CpScheme::chain, parallel::CpScheme::allgather, parallel::CpScheme::alltoall})
  for (bool zigzag : {true, false})
    for (auto variant : {model::GdnVariant::gated_deltanet, model::GdnVariant::jetblock})
      for (auto kernels : {model::Kernels::fused, model::Kernels::reference})
        for (auto mode : {model::GdnMode::chunked, model::GdnMode::recurrent})
          for (int64_t chunk : {64, 4}) {
            if (mode == model::GdnMode::recurrent && chunk != 64) continue;
            auto c = layer_config();
            c.gdn_variant = variant;
            c.gdn_mode = mode;
            c.gdn_chunk = chunk;
            const bool heads = scheme == parallel::CpScheme::alltoall;
            if (heads) c.gdn_heads = 4;  // whole heads on each of 2 or 4 ranks
            SECTION(std::string(parallel::to_string(scheme)) + " " +
                    (zigzag ? "zigzag" : "contiguous") + " " +
                    (variant == model::GdnVariant::jetblock ? "jetblock" : "gated_deltanet") +
                    (kernels == model::Kernels::fused ? " fused" : " reference") +
                    (mode == model::GdnMode::chunked ? " chunked " + std::to_string(chunk)
                                                     : " recurrent")) {
              model::GatedDeltaNet layer(c);
              layer->set_kernels(kernels);
              randomise(*layer);
              auto stats = check_layer(
                  *layer, [&](torch::Tensor x) { return layer->forward(x); }, kT, c.hidden, zigzag,
                  scheme);
              const auto bytes = group_bytes(stats);
              const int64_t H = c.gdn_heads, dk = c.gdn_head_dim_k, dv = c.gdn_head_dim_v;
              const int64_t conv_channels =
                  variant == model::GdnVariant::jetblock ? H * dv : 2 * H * dk + H * dv;
              const int64_t crossing = crossing_boundaries(p, zigzag);
              const int64_t halo = crossing * (c.gdn_conv_width - 1) * conv_channels * kB * kF64;
              // chain: one state a crossing boundary each way; allgather: every piece's
              // transition and state forward (piece 0's transition as zeros), its R dO backward;
              // alltoall: none
              const int64_t pieces = model::seq_piece_count(p, zigzag);
              const std::array<int64_t, 2> state =
                  scheme == parallel::CpScheme::chain
                      ? std::array<int64_t, 2>{crossing * kB * H * dk * dv * kF64,
                                               crossing * kB * H * dk * dv * kF64}
                  : scheme == parallel::CpScheme::allgather
                      ? std::array<int64_t, 2>{pieces * kB * H * (dk * dk + dk * dv) * kF64,
                                               pieces * kB * H * dk * dv * kF64}
                      : std::array<int64_t, 2>{0, 0};
              // alltoall: every rank sends each of the p - 1 others its T / p tokens of their
              // H / p heads: q | k | v and beta | g in, o out; the backward the same back
              const int64_t a2a =
                  heads ? (p - 1) * kB * kT * (H / p) * (2 * dk + 2 + dv + dv) * kF64 : 0;
              using K = parallel::CpExchange;
              for (int d : {0, 1}) {
                INFO("direction " << (d == 0 ? "forward" : "backward"));
                CHECK(bytes[size_t(K::conv_halo)][size_t(d)] == halo);
                CHECK(bytes[size_t(K::gdn_state)][size_t(d)] == state[size_t(d)]);
                CHECK(bytes[size_t(K::gdn_heads)][size_t(d)] == a2a);
                CHECK(bytes[size_t(K::attn_heads)][size_t(d)] == 0);
                CHECK(bytes[size_t(K::window_halo)][size_t(d)] == 0);
                CHECK(bytes[size_t(K::ring_kv)][size_t(d)] == 0);
              }
            }
          }
}

TEST_CASE("context parallel: full and sliding-window attention match the whole sequence in "
          "float64", "[cp]") {
  const int p = world()->size();
  for (bool zigzag : {true, false})
    for (int64_t window : {0, 4, 13}) {
      SECTION(std::string(zigzag ? "zigzag" : "contiguous") + " window " + std::to_string(window)) {
        auto c = layer_config();
        c.attn_kv_heads = 1;  // GQA: tiny's 4 query heads share one KV head
        model::CausalSelfAttention layer(c, window);
        randomise(*layer);
        auto stats = check_layer(
            *layer, [&](torch::Tensor x) { return layer->forward(x); }, kT, c.hidden, zigzag);
        const auto bytes = group_bytes(stats);
        const int64_t kv_width = c.attn_kv_heads * c.attn_head_dim;
        using K = parallel::CpExchange;
        CHECK(bytes[size_t(K::attn_heads)][0] == 0);
        if (window == 0) {
          // ring: p - 1 shifts of every rank's K and V forward; backward p - 1 shifts of K, V,
          // dK, dV and a last one of dK, dV
          const int64_t kv = 2 * kB * (kT / p) * kv_width * kF64;
          CHECK(bytes[size_t(K::ring_kv)][0] == p * (p - 1) * kv);
          CHECK(bytes[size_t(K::ring_kv)][1] == p * (2 * (p - 1) + 1) * kv);
          CHECK(bytes[size_t(K::window_halo)][0] == 0);
          // zigzag: every rank computes the same number of causal score pairs
          auto entries = torch::full({1}, stats.attention_score_entries, torch::kLong);
          auto most = entries.clone(), least = entries.clone();
          world()->all_reduce(most, comm::ReduceOp::Max);
          least.neg_();
          world()->all_reduce(least, comm::ReduceOp::Max);
          if (zigzag) CHECK(most.item<int64_t>() == -least.item<int64_t>());
          else CHECK(most.item<int64_t>() > -least.item<int64_t>());
        } else if (window - 1 <= kT / (zigzag ? 2 * p : p)) {
          // the window - 1 keys and values before each piece boundary between ranks
          const int64_t halo = crossing_boundaries(p, zigzag) * (window - 1) * 2 * kv_width * kB * kF64;
          CHECK(bytes[size_t(K::window_halo)][0] == halo);
          CHECK(bytes[size_t(K::window_halo)][1] == halo);
          CHECK(bytes[size_t(K::ring_kv)][0] == 0);
        }
      }
    }
}

TEST_CASE("context parallel: attention re-sharded to heads (alltoall) matches the whole sequence "
          "in float64", "[cp]") {
  const int p = world()->size();
  for (bool zigzag : {true, false})
    for (int64_t window : {0, 4, 13})
      for (int64_t kv_heads : {1, 2, 4}) {  // KV heads repeated p, p / 2 (or 1) times, or not
        SECTION(std::string(zigzag ? "zigzag" : "contiguous") + " window " +
                std::to_string(window) + " kv heads " + std::to_string(kv_heads)) {
          auto c = layer_config();  // 4 query heads of 16
          c.attn_kv_heads = kv_heads;
          const int64_t repeat = model::attention_kv_repeat(c.attn_heads, kv_heads, p);
          REQUIRE(repeat >= 1);
          model::CausalSelfAttention layer(c, window);
          randomise(*layer);
          auto stats = check_layer(
              *layer, [&](torch::Tensor x) { return layer->forward(x); }, kT, c.hidden, zigzag,
              parallel::CpScheme::chain, parallel::CpAttention::alltoall);
          const auto bytes = group_bytes(stats);
          // every rank sends each of the p - 1 others its T / p tokens of their heads: H / p
          // query heads and KV repeat / p key and value heads in, H / p heads out; the
          // backward the same back
          const int64_t H = c.attn_heads, kv = kv_heads * repeat, hd = c.attn_head_dim;
          const int64_t a2a = (p - 1) * kB * kT * (2 * H + 2 * kv) / p * hd * kF64;
          using K = parallel::CpExchange;
          for (int d : {0, 1}) {
            INFO("direction " << (d == 0 ? "forward" : "backward"));
            CHECK(bytes[size_t(K::attn_heads)][size_t(d)] == a2a);
            CHECK(bytes[size_t(K::ring_kv)][size_t(d)] == 0);
            CHECK(bytes[size_t(K::window_halo)][size_t(d)] == 0);
            CHECK(bytes[size_t(K::gdn_heads)][size_t(d)] == 0);
          }
          CHECK(stats.attention_score_entries == 0);
        }
      }
  // what cannot be sharded so
  CHECK(model::attention_kv_repeat(4, 1, 3) == 0);   // 4 query heads over 3 ranks
  CHECK(model::attention_kv_repeat(6, 2, 4) == 0);   // 6 query heads over 4 ranks
  CHECK(model::attention_kv_repeat(12, 2, 8) == 0);  // Jet-Nemotron-2B's 12 / 2 at cp 8
  CHECK(model::attention_kv_repeat(12, 2, 4) == 2);  // ... at cp 4: 3 query heads, 1 KV
  CHECK(model::attention_kv_repeat(12, 2, 2) == 1);
}

TEST_CASE("context parallel: the sequence layout", "[cp]") {
  const auto z = model::make_seq_layout(16, 2, 1, true);
  REQUIRE(z.local_pieces().size() == 2);
  CHECK(z.local_pieces()[0].begin == 4);
  CHECK(z.local_pieces()[1].begin == 8);
  CHECK(z.local_pieces()[1].local_begin == 4);
  CHECK(z.owner(3) == 0);
  CHECK(z.positions(torch::kCPU).equal(torch::tensor({4, 5, 6, 7, 8, 9, 10, 11}, torch::kLong)));
  const auto c = model::make_seq_layout(16, 4, 3, false);
  CHECK(c.local_pieces().size() == 1);
  CHECK(c.local_pieces()[0].begin == 12);
  CHECK_THROWS_WITH(model::make_seq_layout(18, 4, 0, false), Catch::Contains("--seq-len 18"));
}
