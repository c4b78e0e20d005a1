// ModelConfig validation, presets and config-only accounting (parameters, FLOPs, layer costs).
#include "catch_compat.h"

#include <numeric>

#include "common/error.h"
#include "model/accounting.h"
#include "model/config.h"
#include "model/lora_config.h"

using namespace hlp::model;

TEST_CASE("model: bad configs are user errors with a clear message", "[model][config]") {
  CHECK_THROWS_AS(preset("tiny").with_pattern("GAX"), hlp::UserError);
  CHECK_THROWS_WITH(preset("tiny").with_pattern("GAX"), Catch::Contains("'X'"));
  CHECK_THROWS_AS(preset("tiny").with_pattern(""), hlp::UserError);
  CHECK_THROWS_AS(preset("no-such-model"), hlp::UserError);
  CHECK_THROWS_AS(parse_gdn_mode("fast"), hlp::UserError);
  CHECK_THROWS_AS(preset("tiny").with_vocab(0), hlp::UserError);
  auto c = preset("tiny");
  c.attn_kv_heads = 3;  // does not divide 4
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("does not divide"));
  CHECK_THROWS_AS(make_lora_config(-1, 8, 0, "q_proj"), hlp::UserError);
  CHECK_THROWS_AS(make_lora_config(8, 8, 1.5, "q_proj"), hlp::UserError);
  CHECK_THROWS_AS(make_lora_config(8, 8, 0, "re:(unclosed"), hlp::UserError);
}

TEST_CASE("model: presets have the Jet-Nemotron shapes", "[model][config]") {
  auto jet2 = preset("jet-nemotron-2b");
  CHECK(jet2.pattern == "GGGGGGGGGGGGGGAGGGGASSGGGGGG");
  CHECK(jet2.layer_kind(14) == LayerKind::full_attention);
  CHECK(jet2.layer_kind(19) == LayerKind::full_attention);
  CHECK(jet2.layer_kind(20) == LayerKind::sliding_window);
  CHECK(jet2.layer_kind(21) == LayerKind::sliding_window);
  CHECK(jet2.count_layers(LayerKind::gated_delta) == 24);
  CHECK(jet2.window == 1152);
  auto jet4 = preset("jet-nemotron-4b");
  CHECK(jet4.num_layers() == 36);
  CHECK(jet4.count_layers(LayerKind::full_attention) == 3);
  CHECK(jet4.count_layers(LayerKind::sliding_window) == 7);
  CHECK(jet4.count_layers(LayerKind::gated_delta) == 26);
  CHECK(jet4.layer_kind(32) == LayerKind::full_attention);
  CHECK(jet4.layer_kind(5) == LayerKind::sliding_window);
  auto over = resolve_model_config("small", "GGAS", "recurrent");
  CHECK(over.pattern == "GGAS");
  CHECK(over.gdn_mode == GdnMode::recurrent);
  CHECK(preset("tiny").with_vocab(4000).vocab == 4000);
  CHECK(jet2.gdn_variant == GdnVariant::jetblock);
  CHECK(preset("tiny").gdn_variant == GdnVariant::gated_deltanet);
}

TEST_CASE("model: preset parameter counts (config only, nothing allocated)", "[model][accounting]") {
  const auto jet2 = count_parameters(preset("jet-nemotron-2b"));
  const auto jet4 = count_parameters(preset("jet-nemotron-4b"));
  const auto gpt2 = count_parameters(preset("gpt2-large"));
  const auto small = count_parameters(preset("small"));
  INFO("jet2 " << jet2.total << " jet4 " << jet4.total << " gpt2 " << gpt2.total << " small "
               << small.total);
  // Closed form for the 2B (docs/model-math.md, "Jet-Nemotron shapes" and "The JetBlock variant"):
  const int64_t D = 1536, V = 151936, M = 8960;
  const int64_t mlp = 3 * D * M, norms = 2 * D;
  const int64_t attn = (D * 1536 + 1536) + 2 * (D * 256 + 256) + 1536 * D;
  const int64_t key = 12 * 96, value = 12 * 256;
  const int64_t generator = value / 8;  // dynamic-conv kernel generator D -> 384 -> 4 * value
  const int64_t gdn = 2 * D * key + 2 * D * value + 2 * D * 12 + value * D + 2 * 12 + 256 +
                      D * generator + generator * 4 * value + 4 * value;
  const int64_t closed = V * D + 24 * (gdn + mlp + norms) + 4 * (attn + mlp + norms) + D;
  CHECK(jet2.total == closed);
  CHECK(std::abs(jet2.total - 1.97e9) / 1.97e9 < 0.005);  // published: about 1.97 B
  CHECK(std::abs(jet4.total - 3.96e9) / 3.96e9 < 0.005);  // published: about 3.96 B
  CHECK(std::abs(gpt2.total - 774.0e6) / 774.0e6 < 0.01);
  CHECK(small.total > 10e6);
  CHECK(small.total < 30e6);
  CHECK(jet2.trainable == jet2.total);  // no LoRA = full finetune
  CHECK(std::accumulate(jet2.per_layer_total.begin(), jet2.per_layer_total.end(), int64_t{0}) ==
        jet2.total);
  CHECK(jet2.per_layer_total.size() == 30u);
  CHECK(jet2.per_layer_total[0] == V * D);
  CHECK(jet2.per_layer_total[15] == attn + mlp + norms);  // layer index 15 = block 14 (A)
}

TEST_CASE("model: LoRA trainable counts match the closed form", "[model][accounting][lora]") {
  const auto c = preset("jet-nemotron-2b");
  // default targets q,k,v,o; per G layer r*(2*(1536+1152) + (1536+3072) + (3072+1536)),
  // per A/S layer r*((1536+1536) + 2*(1536+256) + (1536+1536)).
  const int64_t per_g = 2 * (1536 + 1152) + (1536 + 3072) + (3072 + 1536);
  const int64_t per_attn = (1536 + 1536) + 2 * (1536 + 256) + (1536 + 1536);
  for (int64_t r : {8, 32}) {
    const auto counts = count_parameters(c, make_lora_config(r, 2.0 * r, 0.0, "q_proj,k_proj,v_proj,o_proj"));
    CHECK(counts.trainable == r * (24 * per_g + 4 * per_attn));
    CHECK(counts.adapter == counts.trainable);
    CHECK(counts.base == count_parameters(c).total);
  }
  // MLP only
  CHECK(count_parameters(c, make_lora_config(16, 16, 0, "gate_proj,up_proj,down_proj")).trainable ==
        16 * 28 * 3 * (1536 + 8960));
  // regex: only the two full-attention layers
  CHECK(count_parameters(c, make_lora_config(4, 8, 0, "re:blocks\\.(14|19)\\.mixer\\.[qkvo]_proj"))
            .trainable == 4 * 2 * per_attn);
  // adapters + a saved module (the embedding)
  auto with_embedding = make_lora_config(8, 16, 0, "q_proj,k_proj,v_proj,o_proj", "embed_tokens");
  CHECK(count_parameters(c, with_embedding).trainable ==
        8 * (24 * per_g + 4 * per_attn) + 151936 * 1536);
  // the trainable fraction of the default is in PEFT's usual range (0.1 % .. 2 %)
  const auto def = count_parameters(c, LoraConfig{});
  const double fraction = double(def.trainable) / double(def.total);
  CHECK(fraction > 0.001);
  CHECK(fraction < 0.02);
}

TEST_CASE("model: FLOPs: model 6N + mixing, executed 4N frozen + adapters", "[model][accounting]") {
  // The naive attention kernel executes the whole T x T, exactly the model convention's
  // mixing term (the blocked kernel's count: test_blocked_attention.cpp).
  auto c = preset("jet-nemotron-2b");
  c.attn_impl = AttnImpl::naive;
  const int64_t T = 4096;
  const auto full = training_flops_per_token(c, LoraConfig::none(), T);
  const auto counts = count_parameters(c);
  CHECK(full.n_params == counts.total);  // tied: the matrix counted once
  double mixing = 0;
  for (int64_t l = 0; l < c.num_layers(); ++l) mixing += mixing_training_flops_per_token(c, l, T);
  CHECK(full.model_per_token == Approx(6.0 * counts.total + mixing));
  // naive computes the whole T x T in the S layers too: executed = model + their masked part
  double naive_s_extra = 0;
  for (int64_t l = 0; l < c.num_layers(); ++l)
    if (c.layer_kind(l) == LayerKind::sliding_window)
      naive_s_extra += 12.0 * c.attn_heads * c.attn_head_dim * (T - std::min<int64_t>(T, c.window));
  CHECK(full.executed_per_token == Approx(full.model_per_token + naive_s_extra));
  // mixing terms of docs/model-math.md, "FLOPs and MFU"
  CHECK(mixing_training_flops_per_token(c, 14, T) == Approx(12.0 * 12 * 128 * T));
  CHECK(mixing_training_flops_per_token(c, 20, T) == Approx(12.0 * 12 * 128 * 1152));
  CHECK(mixing_training_flops_per_token(c, 0, T) ==
        Approx(3.0 * 12 * (6.0 * 96 * 256 + 64 * (5.0 * 96 + 3.0 * 256))));

  const auto lora = make_lora_config(8, 16, 0, "q_proj,k_proj,v_proj,o_proj");
  const auto lora_counts = count_parameters(c, lora);
  const auto executed = training_flops_per_token(c, lora, T);
  CHECK(executed.model_per_token == Approx(full.model_per_token));
  CHECK(executed.executed_per_token ==
        Approx(4.0 * counts.total + 6.0 * lora_counts.adapter + mixing + naive_s_extra));
  CHECK(full.model_per_token / executed.executed_per_token > 1.3);  // docs/model-math.md: ~1.5x

  // layer costs: size L + 2, sum = executed, head carries the tied matrix
  const auto costs = layer_costs(c, lora, T);
  REQUIRE(costs.size() == 30u);
  CHECK(std::accumulate(costs.begin(), costs.end(), 0.0) == Approx(executed.executed_per_token));
  CHECK(costs[0] == 0.0);
  CHECK(costs[29] == Approx(4.0 * (151936.0 * 1536 + 1536)));
  CHECK(costs[15] == Approx(costs[21]));  // naive: A and S both compute the whole T x T
  auto blocked = c;
  blocked.attn_impl = AttnImpl::blocked;
  const auto blocked_costs = layer_costs(blocked, lora, T);
  CHECK(blocked_costs[15] > blocked_costs[21]);  // full attention at T=4096 > window 1152

  auto checkpointed = c;
  checkpointed.activation_checkpointing = true;
  CHECK(training_flops_per_token(checkpointed, lora, T).executed_per_token >
        executed.executed_per_token);

  const auto forward = layer_forward_flops_per_token(c, T);
  CHECK(forward[15] == Approx(2.0 * count_parameters(c).per_layer_total[15] + 4.0 * 12 * 128 * T));

  // context parallelism over 8 pieces: G layers add the transition pass (d_v -> d_k columns)
  // on 7/8 of the tokens; A and S layers and model FLOPs are unchanged
  const auto cp = layer_costs(c, lora, T, 8);
  CHECK(cp[15] == Approx(costs[15]));
  CHECK(cp[21] == Approx(costs[21]));
  CHECK(cp[1] - costs[1] ==
        Approx(3.0 * 12 * (6.0 * 96 * 96 + 64 * (5.0 * 96 + 3.0 * 96)) * 7.0 / 8.0));
  CHECK(training_flops_per_token(c, lora, T, 8).model_per_token == Approx(executed.model_per_token));
}

TEST_CASE("model: PEFT-style suffix matching of module names", "[model][lora]") {
  CHECK(name_has_suffix("blocks.3.mixer.q_proj", "q_proj"));
  CHECK(name_has_suffix("blocks.3.mixer.q_proj", "mixer.q_proj"));
  CHECK_FALSE(name_has_suffix("blocks.3.mixer.xq_proj", "q_proj"));
  CHECK(name_has_suffix("q_proj", "q_proj"));
  auto regex = make_lora_config(4, 4, 0, "re:.*\\.mlp\\..*");
  CHECK(regex.targets_module("blocks.0.mlp.up_proj"));
  CHECK_FALSE(regex.targets_module("blocks.0.mixer.q_proj"));
  auto saved = make_lora_config(4, 4, 0, "q_proj", "final_norm,mixer_norm");
  CHECK(saved.saves_parameter("final_norm.weight"));
  CHECK(saved.saves_parameter("blocks.2.mixer_norm.weight"));
  CHECK_FALSE(saved.saves_parameter("blocks.2.mlp_norm.weight"));
}

// Issue 27 (found by make fuzz): a target regex's counted repetitions are bounded before
// std::regex compiles them (a count past LONG_MAX overflowed its parser; nested counts expand).
TEST_CASE("model: LoRA target regexes that repeat too much are user errors",
          "[model][lora][bad-input]") {
  const auto check = [](const std::string& regex) {
    return make_lora_config(4, 4, 0, "re:" + regex).validate();
  };
  CHECK_THROWS_WITH(check("q{1992233720368547758078}"), Catch::Contains("repeats too much"));
  CHECK_THROWS_WITH(check("(q_proj{1000}){1000}"), Catch::Contains("repeats too much"));
  CHECK_THROWS_WITH(check("((a|b){1000}c){100}"), Catch::Contains("repeats too much"));
  CHECK_NOTHROW(check(".*\\.(q|k|v)_proj"));
  CHECK_NOTHROW(check("blocks\\.[0-9]{1,2}\\.mlp\\.(up|down)_proj"));
  CHECK_NOTHROW(check("(x{10}){10}"));  // 100 atoms
  CHECK_NOTHROW(check("[{]{3}\\{"));  // braces in a class and escaped are literals
}

// Issue 27: the limits of config_limits.h hold for every config (preset, --pattern, config.json),
// checked before anything is allocated.
TEST_CASE("model: a zero or absurd size and an absurd parameter count are user errors",
          "[model][config][bad-input]") {
  auto c = preset("tiny");
  c.attn_heads = 0;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("attn_heads must be in [1, 1048576], got 0"));
  c = preset("tiny");
  c.gdn_conv_width = int64_t(1) << 40;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("gdn_conv_width must be in [1, 1048576]"));
  CHECK_THROWS_WITH(preset("tiny").with_pattern(std::string(5000, 'G')),
                    Catch::Contains("5000 layers exceed HLP's limit of 4096"));
  c = preset("tiny").with_pattern(std::string(4096, 'G'));  // at the layer limit: fine
  c.hidden = c.vocab = c.mlp_hidden = int64_t(1) << 20;     // each size at its limit
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("exceed HLP's limit of 2^40 bytes (1 TiB)"));
  c.gdn_heads = c.gdn_head_dim_v = c.gdn_head_dim_k = c.gdn_conv_width = int64_t(1) << 20;
  c.gdn_variant = GdnVariant::jetblock;  // w2: 2^60 x 2^40 elements overflow int64: still an error
  CHECK_THROWS_AS(c.validate(), hlp::UserError);
  CHECK_NOTHROW(preset("jet-nemotron-4b").validate());
}

TEST_CASE("model: a real model's vocabulary, kept with its tokenizer, replaced with a warning",
          "[model][config][vocab]") {
  // Qwen's tokenizer (151,669 ids) fills Jet-Nemotron's padded 151,936: the model keeps its own
  const auto qwen = hlp::model::preset_vocabulary("jet-nemotron-2b", 151669, "qwen.json");
  CHECK(qwen.vocab == 151936);
  CHECK(qwen.warning.empty());
  // the byte tokenizer replaces it, and says so
  const auto bytes = hlp::model::preset_vocabulary("jet-nemotron-2b", 257, "byte");
  CHECK(bytes.vocab == 257);
  CHECK_THAT(bytes.warning, Catch::Contains("151936 ids but --tokenizer byte has 257") &&
                                Catch::Contains("233.0 M parameters fewer") &&
                                Catch::Contains("build/datasets/qwen3/tokenizer.json"));
  // tiny and small take any tokenizer's vocabulary as theirs, silently
  CHECK(hlp::model::preset_vocabulary("tiny", 257, "byte").vocab == 257);
  CHECK(hlp::model::preset_vocabulary("small", 4000, "spm.model").warning.empty());
  // a bigger tokenizer than the model's is the tokenizer's (as before)
  CHECK(hlp::model::preset_vocabulary("gpt2-large", 60000, "big.json").vocab == 60000);
  CHECK_FALSE(hlp::model::preset_vocabulary("gpt2-large", 1000, "small.model").warning.empty());
  // Qwen3.5 with Qwen3's tokenizer: shrunk with a warning that names --vocab model, or kept whole
  const auto shrunk = hlp::model::preset_vocabulary("qwen3.5-9b", 151669, "qwen.json");
  CHECK(shrunk.vocab == 151669);
  CHECK_THAT(shrunk.warning, Catch::Contains("--vocab model to keep its 248320 rows"));
  using hlp::model::VocabSource;
  const auto kept = hlp::model::preset_vocabulary("qwen3.5-9b", 151669, "qwen.json", VocabSource::model);
  CHECK(kept.vocab == 248320);
  CHECK(kept.warning.empty());
  CHECK(hlp::model::preset_vocabulary("small", 257, "byte", VocabSource::model).vocab == 4096);
  CHECK_THROWS_WITH(hlp::model::preset_vocabulary("tiny", 4000, "spm.model", VocabSource::model),
                    Catch::Contains("--vocab model: --tokenizer spm.model has 4000 ids, more than "
                                    "--model tiny's 258"));
  CHECK(hlp::model::parse_vocab_source("model") == VocabSource::model);
  CHECK_THROWS_AS(hlp::model::parse_vocab_source("padded"), hlp::UserError);
}

TEST_CASE("model: the Qwen3.5 and Qwen3-Next presets are the published models' shapes",
          "[model][config]") {
  // Qwen/Qwen3.5-9B and -27B text_config (src/model/README.md): parameter counts of the text model
  using hlp::model::preset;
  const auto nine = preset("qwen3.5-9b"), big = preset("qwen3.5-27b");
  CHECK(nine.pattern == "GGGAGGGAGGGAGGGAGGGAGGGAGGGAGGGA");
  CHECK(big.pattern.size() == 64);
  CHECK(hlp::model::count_parameters(nine).total == 8953803264);
  CHECK(hlp::model::count_parameters(big).total == 26895998464);
  // Qwen3-Next-80B-A3B: every MLP sparse, 512 experts; 10 a token count in the FLOPs
  const auto next = preset("qwen3-next-80b-a3b");
  CHECK(next.count_moe_layers() == 48);
  CHECK(hlp::model::count_parameters(next).total == 79674391296);
  CHECK(hlp::model::count_parameters(preset("small-moe")).total == 18426656);
}

TEST_CASE("model: frozen matrices in the base dtype, the rest fp32", "[model][precision]") {
  using hlp::model::BaseDtype;
  using hlp::model::Precision;
  CHECK(hlp::model::resolve_base_dtype(BaseDtype::automatic, Precision::bf16) == BaseDtype::bf16);
  CHECK(hlp::model::resolve_base_dtype(BaseDtype::automatic, Precision::fp16) == BaseDtype::fp16);
  CHECK(hlp::model::resolve_base_dtype(BaseDtype::automatic, Precision::fp32) == BaseDtype::fp32);
  CHECK(hlp::model::resolve_base_dtype(BaseDtype::fp32, Precision::bf16) == BaseDtype::fp32);
  CHECK_THROWS_WITH(hlp::model::resolve_base_dtype(BaseDtype::bf16, Precision::fp32),
                    Catch::Contains("--base-dtype bf16 with --precision fp32 is not supported") &&
                        Catch::Contains("use --base-dtype auto"));
  CHECK_THROWS_AS(hlp::model::resolve_base_dtype(BaseDtype::fp16, Precision::bf16),
                  hlp::UserError);
  CHECK(hlp::model::parameter_element_bytes(false, 2, BaseDtype::bf16) == 2);  // frozen matrix
  CHECK(hlp::model::parameter_element_bytes(false, 1, BaseDtype::bf16) == 4);  // frozen vector
  CHECK(hlp::model::parameter_element_bytes(false, 3, BaseDtype::bf16) == 4);  // conv kernel
  CHECK(hlp::model::parameter_element_bytes(true, 2, BaseDtype::bf16) == 4);   // adapter
  CHECK(hlp::model::parameter_element_bytes(false, 2, BaseDtype::fp32) == 4);
  // jet-nemotron-2b with LoRA r 32 on the seven projections: the frozen matrices are nearly all
  const auto c = hlp::model::resolve_model_config("jet-nemotron-2b", "", "");
  const auto lora = hlp::model::make_lora_config(
      32, 64, 0, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  const double fp32 = double(hlp::model::stored_parameter_bytes(c, lora, BaseDtype::fp32));
  const double bf16 = double(hlp::model::stored_parameter_bytes(c, lora, BaseDtype::bf16));
  CHECK(bf16 / fp32 < 0.52);
  CHECK(bf16 / fp32 > 0.50);
}
