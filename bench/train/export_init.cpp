// hlp-export-init: the starting point of an hlp-train run, written for the PyTorch peer
// (bench/peer/). It builds the model exactly as hlp-train does (src/train/session.cpp:
// resolve_run_model(config, loader vocab), apply_lora(its LoRA config), seed)
// and writes, into --out-dir:
//   config.json  model config + LoRA config + data shape (what the Python model needs)
//   params.json  [{name, shape, offset_bytes, trainable}] in named_parameters() order
//   params.bin   every parameter, float32, row-major, concatenated
//   tokens.bin   the first --batches global batches, int64 [batches, G, T+1] row-major
//                (hlp::data::Loader with dp_size 1: the same global batches every dp size sees)
// So both sides start from identical weights and see identical data.
// With --weights no only config.json and params.json (names, shapes, trainable; no offsets) are
// written: the architecture and the adapted modules, for a throughput peer that initialises its
// own weights (bench/peer/peer_step.py on a GPU: a 2 B model's params.bin would be 8 GB).
//
//   hlp-export-init --model small --tokenizer spm.model --data corpus.txt --seq-len 256
//     --global-batch 8 --lora-rank 8 --lora-alpha 16 --seed 1234 --batches 6 --out-dir DIR
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "data/loader.h"
#include "model/config.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "model/lora_config.h"
#include "train/config.h"
#include "train/data_options.h"
#include "train/trainer.h"

namespace {

using hlp::user_error;

const char* kUsage =
    "usage: hlp-export-init --out-dir DIR [--model tiny|small] [--pattern P] [--data PATH]\n"
    "  [--tokenizer byte|FILE.model] [--seq-len T] [--global-batch G] [--lora-rank r]\n"
    "  [--lora-alpha a] [--lora-targets LIST] [--seed S] [--batches K] [--weights yes|no]\n"
    "Defaults are hlp-train's (src/train/config.h).";

struct Options {
  hlp::train::TrainConfig train;
  std::string out_dir;
  int batches = 6;
  bool weights = true;  // params.bin and tokens.bin
};

Options parse(int argc, char** argv) {
  Options o;
  o.train.data = HLP_DEFAULT_DATA;
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts(kUsage);
      std::exit(0);
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc)
      throw user_error("hlp-export-init: expected '--option value', got '", a, "'\n", kUsage);
    kv[a.substr(2)] = argv[++i];
  }
  auto& t = o.train;
  for (const auto& [key, value] : kv) {
    try {
      if (key == "out-dir") o.out_dir = value;
      else if (key == "model") t.model = value;
      else if (key == "pattern") t.pattern = value;
      else if (key == "data") t.data = value;
      else if (key == "tokenizer") t.tokenizer = value;
      else if (key == "seq-len") t.seq_len = std::stoi(value);
      else if (key == "global-batch") t.global_batch = std::stoi(value);
      else if (key == "lora-rank") t.lora_rank = std::stoi(value);
      else if (key == "lora-alpha") t.lora_alpha = std::stod(value);
      else if (key == "lora-targets") t.lora_targets = value;
      else if (key == "seed") t.seed = std::stoull(value);
      else if (key == "batches") o.batches = std::stoi(value);
      else if (key == "weights" && (value == "yes" || value == "no")) o.weights = value == "yes";
      else if (key == "weights")
        throw user_error("hlp-export-init: --weights takes yes or no, got '", value, "'");
      else throw user_error("hlp-export-init: unknown option --", key, "\n", kUsage);
    } catch (const std::logic_error&) {  // stoi/stod: invalid_argument, out_of_range
      throw user_error("hlp-export-init: --", key, " needs a number, got '", value, "'");
    }
  }
  if (o.out_dir.empty()) throw user_error("hlp-export-init: --out-dir is required\n", kUsage);
  if (o.batches < 1) throw user_error("hlp-export-init: --batches must be >= 1");
  return o;
}

nlohmann::json config_json(const hlp::model::ModelConfig& c, const hlp::train::TrainConfig& t,
                           int batches) {
  using hlp::model::GdnVariant;
  nlohmann::json j;
  j["model"] = {{"name", c.name},
                {"pattern", c.pattern},
                {"hidden", c.hidden},
                {"mlp_hidden", c.mlp_hidden},
                {"vocab", c.vocab},
                {"attn_heads", c.attn_heads},
                {"attn_kv_heads", c.attn_kv_heads},
                {"attn_head_dim", c.attn_head_dim},
                {"attn_qkv_bias", c.attn_qkv_bias},
                {"window", c.window},
                {"rope_theta", c.rope_theta},
                {"gdn_heads", c.gdn_heads},
                {"gdn_head_dim_k", c.gdn_head_dim_k},
                {"gdn_head_dim_v", c.gdn_head_dim_v},
                {"gdn_conv_width", c.gdn_conv_width},
                {"gdn_chunk", c.gdn_chunk},
                {"gdn_variant", c.gdn_variant == GdnVariant::jetblock ? "jetblock" : "gated_deltanet"},
                {"gdn_dconv_reduction", c.gdn_dconv_reduction},
                {"rms_eps", c.rms_eps},
                {"gdn_norm_eps", c.gdn_norm_eps},
                {"tied_embeddings", c.tied_embeddings}};
  j["lora"] = {{"rank", t.lora_rank}, {"alpha", t.lora_alpha}, {"targets", t.lora_targets}};
  j["data"] = {{"path", t.data},          {"tokenizer", t.tokenizer},
               {"seq_len", t.seq_len},    {"global_batch", t.global_batch},
               {"batches", batches},      {"seed", t.seed}};
  return j;
}

void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) throw user_error("hlp-export-init: cannot write ", path.string());
}

int run(const Options& o) {
  const auto& t = o.train;
  std::filesystem::create_directories(o.out_dir);
  const std::filesystem::path dir(o.out_dir);

  // Data first: the tokenizer decides the vocab (as in session.cpp).
  hlp::data::Loader loader(hlp::train::data_options_for(t), /*dp_rank=*/0, /*dp_size=*/1);

  // hlp-train's model: a real preset keeps its padded vocabulary under its own tokenizer
  const hlp::train::RunModel run_model = hlp::train::resolve_run_model(t, loader.vocab_size());
  const hlp::model::ModelConfig& mc = run_model.model;
  hlp::model::HybridLM model(mc, t.seed);
  auto report = hlp::model::apply_lora(model, run_model.lora);

  // Parameters: index + float32 blob.
  nlohmann::json index = nlohmann::json::array();
  std::ofstream blob;
  if (o.weights) blob.open(dir / "params.bin", std::ios::binary);
  int64_t offset = 0;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    if (!o.weights) {
      index.push_back({{"name", item.key()},
                       {"shape", item.value().sizes().vec()},
                       {"trainable", item.value().requires_grad()}});
      continue;
    }
    at::Tensor p = item.value().detach().to(at::kFloat).contiguous();
    blob.write(reinterpret_cast<const char*>(p.data_ptr<float>()), std::streamsize(p.nbytes()));
    index.push_back({{"name", item.key()},
                     {"shape", p.sizes().vec()},
                     {"offset_bytes", offset},
                     {"trainable", item.value().requires_grad()}});
    offset += int64_t(p.nbytes());
  }
  if (o.weights && !blob)
    throw user_error("hlp-export-init: cannot write ", (dir / "params.bin").string());
  write_json(dir / "params.json", index);

  // The first K global batches: [K, G, T+1] int64.
  std::ofstream tokens;
  if (o.weights) tokens.open(dir / "tokens.bin", std::ios::binary);
  for (int k = 0; o.weights && k < o.batches; ++k) {
    hlp::data::Batch b = loader.next();
    tokens.write(reinterpret_cast<const char*>(b.tokens.data()),
                 std::streamsize(b.tokens.size() * sizeof(int64_t)));
  }
  if (o.weights && !tokens)
    throw user_error("hlp-export-init: cannot write ", (dir / "tokens.bin").string());

  auto cfg = config_json(mc, t, o.batches);
  cfg["params_total"] = report.total_params;
  cfg["params_trainable"] = report.trainable_params;
  write_json(dir / "config.json", cfg);
  std::printf("[hlp-export-init] %s: %lld parameters (%lld trainable), %d batches [%d, %d] -> %s\n",
              mc.summary().c_str(), (long long)report.total_params,
              (long long)report.trainable_params, o.batches, t.global_batch, t.seq_len + 1,
              o.out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const hlp::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
