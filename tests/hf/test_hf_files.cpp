// Pins down the pieces of model/hf on their own: the safetensors reader and writer, dtype
// conversion, the HF <-> HLP name table, config.json -> ModelConfig. The fixture
// (make_fixture.py, written by Python without HLP) is in $HLP_HF_FIXTURE.
#include "catch_compat.h"
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/printable.h"
#include "model/accounting.h"
#include "model/hf/checkpoint.h"
#include "model/hf/config_json.h"
#include "model/hf/names.h"
#include "model/hf/peft.h"
#include "model/hf/safetensors.h"

using namespace hlp::model;
using namespace hlp::model::hf;
namespace fs = std::filesystem;

namespace {

std::string fixture() {
  const char* dir = std::getenv("HLP_HF_FIXTURE");
  return dir ? dir : HLP_HF_FIXTURE_DIR;  // written by the hf_fixture test (make_fixture.py)
}

std::string temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("hlp_hf_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("safetensors: written tensors read back bit-exactly, by region", "[hf]") {
  const std::string path = temp_dir("rw") + "/t.safetensors";
  auto a = torch::randn({5, 7});
  auto b = torch::arange(24, torch::kLong).view({2, 3, 4});
  auto c = torch::randn({3}).to(torch::kBFloat16);
  write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}}, {{"format", "pt"}});
  SafetensorsFile f(path);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.entry("c").dtype == "BF16");
  CHECK(torch::equal(f.read("a"), a));
  CHECK(torch::equal(f.read("b"), b));
  CHECK(torch::equal(f.read("c"), c.to(torch::kFloat)));
  // rows 1..3 and columns 2..5 of a: a strided region read by byte ranges
  auto dest = torch::empty({3, 4});
  f.read_region("a", Region::whole({5, 7}).narrowed(0, 1, 3).narrowed(1, 2, 4), dest);
  CHECK(torch::equal(dest, a.narrow(0, 1, 3).narrow(1, 2, 4)));
  auto b_dest = torch::empty({2, 1, 2}, torch::kLong);
  f.read_region("b", Region::whole({2, 3, 4}).narrowed(1, 2, 1).narrowed(2, 1, 2), b_dest);
  CHECK(torch::equal(b_dest, b.narrow(1, 2, 1).narrow(2, 1, 2)));
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("safetensors: BF16 and F16 checkpoints convert to float32 exactly", "[hf]") {
  HfCheckpoint f32(fixture());
  HfCheckpoint bf16(fixture() + "/bf16");
  HfCheckpoint fp16(fixture() + "/fp16/model.safetensors");
  REQUIRE(f32.file_count() == 2);  // the sharded index
  int64_t checked = 0;
  for (const auto& name : f32.names()) {
    auto full = f32.entry(name).shape;
    auto ref = torch::empty(full);
    f32.read_region(name, Region::whole(full), ref);
    auto from_bf16 = torch::empty(full);
    bf16.read_region(name, Region::whole(full), from_bf16);
    CHECK(bf16.entry(name).dtype == "BF16");
    CHECK(torch::equal(from_bf16, ref.to(torch::kBFloat16).to(torch::kFloat)));
    auto from_fp16 = torch::empty(full);
    fp16.read_region(name, Region::whole(full), from_fp16);
    CHECK(torch::equal(from_fp16, ref.to(torch::kHalf).to(torch::kFloat)));
    // and straight into a bf16 destination: the stored bits
    auto into_bf16 = torch::empty(full, torch::kBFloat16);
    bf16.read_region(name, Region::whole(full), into_bf16);
    CHECK(torch::equal(into_bf16, ref.to(torch::kBFloat16)));
    ++checked;
  }
  CHECK(checked == 62);
}

TEST_CASE("safetensors: each defect is one clear UserError", "[hf]") {
  const std::string broken = fixture() + "/broken";
  auto message_of = [](const std::string& path) -> std::string {
    try {
      HfCheckpoint c(path);
      check_against(c, expected_base_tensors(read_hf_config(fixture()).config),
                    {}, "--init-from checkpoint");
    } catch (const hlp::UserError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(message_of(broken + "/corrupted_header"), Catch::Contains("corrupted header"));
  CHECK_THAT(message_of(broken + "/truncated"), Catch::Contains("is truncated"));
  CHECK_THAT(message_of(broken + "/wrong_dtype"),
             Catch::Contains("unreadable dtype 1") && Catch::Contains("model.embed_tokens.weight I32"));
  CHECK_THAT(message_of(broken + "/missing_shard"),
             Catch::Contains("model-00002-of-00002.safetensors") && Catch::Contains("do not exist"));
  CHECK_THAT(message_of(broken + "/shape_mismatch"),
             Catch::Contains("wrong shape 4") && Catch::Contains("model.layers.0.mlp.up_proj.weight [63, 32] (expected [64, 32])"));
  CHECK(message_of(fixture()).empty());
}

TEST_CASE("names: one table maps every HLP parameter to its Hugging Face name and back", "[hf]") {
  CHECK(hf_name_of("embed_tokens.weight") == "model.embed_tokens.weight");
  CHECK(hf_name_of("final_norm.weight") == "model.norm.weight");
  CHECK(hf_name_of("blocks.12.mixer_norm.weight") == "model.layers.12.input_layernorm.weight");
  CHECK(hf_name_of("blocks.3.mlp_norm.weight") == "model.layers.3.post_attention_layernorm.weight");
  CHECK(hf_name_of("blocks.0.mixer.dynamic_conv1d.kernel_generator.w2.bias") ==
        "model.layers.0.self_attn.dynamic_conv1d.kernel_generator.w2.bias");
  CHECK(hf_name_of("blocks.19.mixer.q_proj") == "model.layers.19.self_attn.q_proj");
  CHECK(hlp_name_of("model.layers.7.mlp.down_proj.weight") == "blocks.7.mlp.down_proj.weight");
  CHECK(hlp_name_of("model.layersX.7.mlp") == "");
  CHECK(peft_name_of("blocks.3.mixer.q_proj.lora_A") ==
        "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight");
  for (const auto& p : parameter_table(preset("jet-nemotron-2b"), LoraConfig::none()))
    CHECK(hlp_name_of(hf_name_of(p.name)) == p.name);
}

TEST_CASE("config.json: the fixture's Jet-Nemotron config gives the expected ModelConfig", "[hf]") {
  const auto hf = read_hf_config(fixture());
  const ModelConfig& c = hf.config;
  CHECK(c.pattern == "GAGS");
  CHECK(c.hidden == 32);
  CHECK(c.gdn_head_dim_v == 16);
  CHECK(c.gdn_norm_eps == Approx(1e-5));
  CHECK(c.rms_eps == Approx(1e-6));
  CHECK(c.window == 5);
  CHECK(c.gdn_variant == GdnVariant::jetblock);
  const std::string text = provenance_text(hf);
  CHECK_THAT(text, Catch::Contains("model.hidden = 32  <- config.json: hidden_size"));
  CHECK_THAT(text, Catch::Contains("model.gdn_head_dim_v = 16  <- round(head_dim x expand_v 2)"));
}

TEST_CASE("config.json: Jet-Nemotron-2B's config.json equals the jet-nemotron-2b preset", "[hf]") {
  // The public jetai/modeling/configs/jetlm_2B.json (NVlabs/Jet-Nemotron), field for field.
  const std::string dir = temp_dir("jet2b");
  write_text(dir + "/config.json", R"({
  "architectures": ["JetNemotronForCausalLM"], "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_jet_nemotron.JetNemotronConfig",
               "AutoModelForCausalLM": "modeling_jet_nemotron.JetNemotronForCausalLM"},
  "bos_token_id": 151643,
  "efficient_attention_config": {
    "jet": {"conv_size": 4, "dconv_generator_reduction": 8, "dconv_implementation": "triton",
            "expand_v": 2.6666666667, "head_dim": 96, "mode": "chunk", "norm_eps": "1e-5",
            "num_heads": 12},
    "swa": {"window_size": 1152}},
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 1536, "initializer_range": 0.02,
  "intermediate_size": 8960,
  "layer_types": ["jet","jet","jet","jet","jet","jet","jet","jet","jet","jet","jet","jet","jet",
                  "jet","attn","jet","jet","jet","jet","attn","swa","swa","jet","jet","jet","jet",
                  "jet","jet"],
  "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "jet_nemotron",
  "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.3",
  "use_cache": true, "use_mrope": false, "vocab_size": 151936})");
  const ModelConfig from_json = read_hf_config(dir).config;
  const ModelConfig p = preset("jet-nemotron-2b");
  const auto a = parameter_table(from_json, LoraConfig::none());
  const auto b = parameter_table(p, LoraConfig::none());
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].name == b[i].name);
    CHECK(a[i].shape == b[i].shape);
  }
  CHECK(count_parameters(from_json).total == count_parameters(p).total);
  CHECK(from_json.pattern == p.pattern);
  CHECK(from_json.window == p.window);
  CHECK(from_json.rope_theta == p.rope_theta);
  fs::remove_all(dir);
}

TEST_CASE("config.json: Qwen2 configs load, unimplemented fields are named errors", "[hf]") {
  const std::string dir = temp_dir("qwen2");
  const std::string base = R"("model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
    "vocab_size": 300, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu")";
  auto c = read_hf_config(write_text(dir + "/a.json", "{" + base + R"(, "tie_word_embeddings": false,
    "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 2})")).config;
  CHECK(c.pattern == "AASS");
  CHECK(c.window == 8);
  CHECK(c.attn_head_dim == 16);
  CHECK_FALSE(c.tied_embeddings);
  const auto table = expected_base_tensors(c);
  CHECK(table.back().file_name == "lm_head.weight");
  CHECK(table[1].file_name == "model.layers.0.input_layernorm.weight");
  CHECK(read_hf_config(write_text(dir + "/b.json", "{" + base + "}")).config.pattern == "AAAA");
  auto error_of = [&](const std::string& extra) -> std::string {
    try {
      read_hf_config(write_text(dir + "/c.json", "{" + base + ", " + extra + "}"));
    } catch (const hlp::UserError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error_of(R"("attention_bias": false)"), Catch::Contains("field 'attention_bias' is not implemented"));
  CHECK_THAT(error_of(R"("rope_scaling": {"type": "yarn"})"), Catch::Contains("'rope_scaling'"));
  CHECK_THAT(error_of(R"("hidden_act": "gelu")"), Catch::Contains("'hidden_act'"));
  fs::remove_all(dir);
}

// transformers 5 writes rope_parameters (rope_theta, rope_type) and dtype instead of rope_theta
// and torch_dtype: this is the config.json of transformers 5.12.1's save_pretrained for a small
// random Qwen2 (tests/hf/transformers5/make_reference.py), byte for byte.
TEST_CASE("config.json: transformers 5's dialect (rope_parameters, dtype) loads", "[hf]") {
  const std::string dir = temp_dir("qwen2_v5");
  const std::string v5 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": null,
  "dtype": "float32", "eos_token_id": null, "hidden_act": "silu", "hidden_size": 64,
  "initializer_range": 0.02, "intermediate_size": 128,
  "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 512,
  "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 4,
  "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": null, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "sliding_window": null,
  "tie_word_embeddings": false, "transformers_version": "5.12.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 256})";
  const auto c = read_hf_config(write_text(dir + "/config.json", v5)).config;
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.pattern == "AA");
  CHECK(c.vocab == 256);
  CHECK_FALSE(c.tied_embeddings);
  auto error_of = [&](const std::string& from, const std::string& to) -> std::string {
    std::string text = v5;
    text.replace(text.find(from), from.size(), to);
    try {
      read_hf_config(write_text(dir + "/bad.json", text));
    } catch (const hlp::UserError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error_of(R"("rope_type": "default")", R"("rope_type": "yarn")"),
             Catch::Contains("rope_parameters: field 'rope_type'"));
  CHECK_THAT(error_of(R"("rope_type": "default")", R"("rope_type": "default", "partial_rotary_factor": 0.5)"),
             Catch::Contains("'partial_rotary_factor'"));
  CHECK_THAT(error_of(R"("rope_type": "default")", R"("rope_type": "default", "factor": 4.0)"),
             Catch::Contains("rope_parameters: field 'factor' is not implemented"));
  CHECK_THAT(error_of(R"("rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"})",
                      R"("rope_parameters": 10000.0)"),
             Catch::Contains("'rope_parameters' is not a JSON object"));
  CHECK_THAT(error_of(R"("dtype": "float32",)", R"("dtype": "float32", "rope_theta": 5.0,)"),
             Catch::Contains("disagrees with rope_parameters.rope_theta"));
  fs::remove_all(dir);
}

// Hostile config.json files (issue 27): every size that divides or allocates is checked before
// any arithmetic, so a zero head count is a named error, not SIGFPE, and an absurd layer count or
// width is refused before anything is allocated, not by the OOM killer.
TEST_CASE("config.json: zero, fractional and absurd sizes are named errors", "[hf][bad-input]") {
  const std::string dir = temp_dir("hostile");
  const std::string qwen2 = R"("model_type": "qwen2", "intermediate_size": 128,
    "num_key_value_heads": 2, "vocab_size": 300, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
    "hidden_act": "silu", )";
  auto error_of = [&](const std::string& fields) -> std::string {
    try {
      read_hf_config(write_text(dir + "/config.json", "{" + qwen2 + fields + "}"));
    } catch (const hlp::UserError& e) {
      return e.what();
    }
    return "";
  };
  const std::string sizes = R"("hidden_size": 64, "num_hidden_layers": 2, )";
  REQUIRE(error_of(sizes + R"("num_attention_heads": 4)").empty());
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 0)"),
             Catch::Contains("config.json: field 'num_attention_heads' = 0 must be a whole number "
                             "in [1, 1048576]"));
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 4, "num_key_value_heads": 0)"),
             Catch::Contains("'num_key_value_heads' = 0"));
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 4, "head_dim": -16)"),
             Catch::Contains("'head_dim' = -16"));
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 2.5)"), Catch::Contains("whole number"));
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 3)"),
             Catch::Contains("hidden_size 64 is not a multiple of num_attention_heads 3"));
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 4, "rms_norm_eps": 0)"),
             Catch::Contains("'rms_norm_eps' = 0"));
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 4, "use_sliding_window": true,
                                 "max_window_layers": -3, "sliding_window": 8)"),
             Catch::Contains("'max_window_layers' = -3"));
  CHECK_THAT(error_of(R"("hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1000000000)"),
             Catch::Contains("'num_hidden_layers' = 1000000000") && Catch::Contains("[1, 4096]"));
  CHECK_THAT(error_of(R"("hidden_size": 18446744073709551615, "num_attention_heads": 4,
                         "num_hidden_layers": 2)"),
             Catch::Contains("'hidden_size' = 18446744073709551615"));
  // Every size within its bound, the whole far beyond: the parameter bytes in closed form.
  CHECK_THAT(error_of(R"("hidden_size": 1048576, "num_attention_heads": 8192,
                         "num_hidden_layers": 4096, "vocab_size": 1048576)"),
             Catch::Contains("parameters") && Catch::Contains("exceed HLP's limit of 2^40 bytes"));
  // A key with control characters is quoted escaped: the message stays one line.
  CHECK_THAT(error_of(sizes + R"("num_attention_heads": 4, "x\n\u001b[2J": 1)"),
             Catch::Contains(R"(field 'x\x0A\x1B[2J' is not implemented)"));
  fs::remove_all(dir);
}

TEST_CASE("config.json: a Jet-Nemotron config with a zero or absurd GDN size is a named error",
          "[hf][bad-input]") {
  std::ifstream in(fixture() + "/config.json");
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string dir = temp_dir("hostile_jet");
  auto error_of = [&](const std::string& from, const std::string& to) -> std::string {
    std::string text = good;
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    try {
      read_hf_config(write_text(dir + "/config.json", text));
    } catch (const hlp::UserError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error_of(R"("conv_size": 4)", R"("conv_size": 0)"),
             Catch::Contains("efficient_attention_config.jet: field 'conv_size' = 0"));
  CHECK_THAT(error_of(R"("num_heads": )", R"("num_heads": 0, "x": )"),
             Catch::Contains("'num_heads' = 0"));
  CHECK_THAT(error_of(R"("expand_v": 2.0)", R"("expand_v": 1e300)"),
             Catch::Contains("x expand_v 1e+300 is not a value head dim"));
  fs::remove_all(dir);
}

// A corrupted safetensors header is quoted by the JSON parser's message: its bytes reach the
// error line escaped, so the line is valid UTF-8 (issue 27).
TEST_CASE("safetensors: a corrupted header's bytes are quoted as valid UTF-8", "[hf][bad-input]") {
  const std::string dir = temp_dir("badheader");
  const std::string header = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \xFF\xFE\n";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  write_text(dir + "/model.safetensors", bytes + header);
  std::string message;
  try {
    SafetensorsFile f(dir + "/model.safetensors");
  } catch (const hlp::UserError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("model.safetensors' has a corrupted header") &&
                          Catch::Contains(R"(\xFF)"));
  CHECK(hlp::printable(message, std::string::npos) == message);  // valid UTF-8, no control bytes
  fs::remove_all(dir);
}

TEST_CASE("peft: adapter files carry PEFT names and config keys", "[hf]") {
  const ModelConfig c = read_hf_config(fixture()).config;
  const LoraConfig lora = make_lora_config(4, 8, 0.0, "q_proj,v_proj");
  std::map<std::string, torch::Tensor> adapters;
  for (const auto& e : expected_adapter_tensors(c, lora)) adapters[e.hlp_name] = torch::randn(e.shape);
  const std::string dir = temp_dir("peft");
  write_peft_adapter(dir, adapters, c, lora, "tiny-jet");
  HfCheckpoint back(dir);
  check_against(back, expected_adapter_tensors(c, lora), {}, "adapter");
  for (const auto& [name, t] : adapters) {
    auto read = torch::empty(t.sizes());
    back.read_region(peft_name_of(name), Region::whole(t.sizes().vec()), read);
    CHECK(torch::equal(read, t));
  }
  const LoraConfig again = read_peft_config(dir, LoraConfig{});
  CHECK(again.rank == 4);
  CHECK(again.alpha == 8);
  CHECK(again.targets == std::vector<std::string>{"q_proj", "v_proj"});
  fs::remove_all(dir);
}
