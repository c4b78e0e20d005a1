#pragma once
// The resolved configuration of one hlp-train job. Plain data (no LibTorch): filled by the CLI
// (src/cli), which parses every choice into its enum once, read by the trainer and strategies,
// printed back as INI into every result file.
#include <cstdint>
#include <string>

#include "common/enum_names.h"
#include "model/config.h"
#include "model/precision.h"
#include "parallel/registry.h"

namespace hlp::train {

// --device: where a rank computes (train/device.h resolves automatic).
enum class DeviceKind : uint8_t { automatic, cpu, cuda };
inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {
    {DeviceKind::automatic, "auto"}, {DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}};
// --comm: what the strategies' collectives run on (train/device.h resolves automatic).
enum class CommBackend : uint8_t { automatic, nccl, mpi };
inline constexpr EnumName<CommBackend> kCommBackendNames[] = {
    {CommBackend::automatic, "auto"}, {CommBackend::nccl, "nccl"}, {CommBackend::mpi, "mpi"}};
inline const char* to_string(DeviceKind d) { return enum_name(d, kDeviceKindNames); }
inline const char* to_string(CommBackend c) { return enum_name(c, kCommBackendNames); }

struct TrainConfig {
  // parallelism (the rules: parallel/registry.h)
  parallel::StrategyKind strategy = parallel::StrategyKind::single;
  int tp = 1;                       // tensor-parallel size (composes with a dp strategy)
  int pp = 1;                       // pipeline-parallel size
  std::string pp_split = "balanced";  // uniform|params|balanced|profiled|L0,L1,... (stage_split.h)
  parallel::PipeSchedule pp_schedule = parallel::PipeSchedule::one_f_one_b;
  int pp_virtual = 1;                 // model chunks per stage (interleaved)
  int cp = 1;                         // context-parallel size: the sequence split over cp ranks
  parallel::CpLayout cp_layout = parallel::CpLayout::zigzag;  // which pieces of T a cp rank holds
  parallel::CpScheme cp_scheme = parallel::CpScheme::chain;   // how the G layers' state travels
  parallel::CpAttention cp_attention = parallel::CpAttention::ring;  // how A / S layers exchange
  int ep = 1;                         // expert-parallel size: MoE experts split over ep dp ranks
  int micro_batches = 0;              // M; 0 = derived from global / (dp * micro_batch)
  double bucket_mb = 25.0;            // DDP gradient bucket size
  double comm_timeout_s = 300.0;
  CommBackend comm = CommBackend::automatic;  // auto = nccl on CUDA, mpi on CPU (train/device.h)

  // model
  std::string model = "tiny";       // a preset (model::resolve_model_config)
  std::string pattern;              // overrides the preset's layer pattern when non-empty
  model::GdnMode gdn_mode = model::GdnMode::chunked;
  // auto (fused on the CPU, lean on CUDA; recorded resolved) | fused | lean | reference
  model::Kernels kernels = model::Kernels::automatic;
  model::LossImpl loss_impl = model::LossImpl::chunked;  // chunked | full (logits held)
  model::AttnImpl attn_impl = model::AttnImpl::automatic;
  bool activation_checkpointing = false;
  bool allow_overcommit = false;    // run even when the predicted peak exceeds the memory left
  std::string model_config;  // Hugging Face config.json (file or directory) instead of --model
  std::string init_from;     // HF checkpoint: directory, .safetensors or .index.json; "" = seed init

  // finetuning
  int lora_rank = 8;  // 0 = full finetune
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  std::string lora_targets = "q_proj,k_proj,v_proj,o_proj";
  std::string load_adapter;  // PEFT adapter directory to start from (its r / alpha / targets win)
  std::string save_adapter;  // PEFT adapter directory written at the end (and in each checkpoint)
  std::string save_merged;   // directory for merged full weights (HF names) at the end; "" = none

  // data
  std::string data;                 // file, directory or glob of .txt / .jsonl
  std::string jsonl_field = "text";
  std::string tokenizer = "byte";   // byte | FILE.model (SentencePiece) | FILE.json (HF BPE)
  model::VocabSource vocab = model::VocabSource::tokenizer;  // a preset's rows: tokenizer | model
  int loader_threads = 2;
  int queue_depth = 8;
  int seq_len = 128;
  int micro_batch = 4;              // B: sequences per micro-batch per data-parallel rank
  int global_batch = 8;             // G: sequences per optimizer step, all ranks together

  // run
  int steps = 20;
  int warmup_steps = 2;             // LR warm-up steps (linear), then cosine to min_lr_ratio
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.0;
  double grad_clip = 1.0;           // global gradient-norm clip; 0 = off
  model::Precision precision = model::Precision::fp32;
  // storage of frozen weight matrices; hlp-train resolves auto (model/precision.h)
  model::BaseDtype base_dtype = model::BaseDtype::automatic;
  double loss_scale_init = 65536.0;  // fp16: first dynamic loss scale (train/loss_scaler.h)
  int loss_scale_growth_interval = 2000;  // fp16: clean steps before the scale doubles
  DeviceKind device = DeviceKind::automatic;  // auto = cuda when usable, else cpu (train/device.h)
  uint64_t seed = 1234;
  int threads = 0;                  // compute threads per rank (every pool); 0 = auto (thread_pools.h)
  int eval_every = 0;               // 0 = no eval loss
  std::string out;                  // result file (.h5); empty = no result file
  int flush_every = 5;              // result-file flush period in steps
  int64_t result_reserve_kib = -1;  // disk-full reserve's going-on part; -1 auto, 0 none
  bool trace = true;                // record trace events
  std::string checkpoint_dir;       // empty = no checkpoints
  int checkpoint_every = 0;         // 0 = only on signal / at the end
  bool resume = false;

  // The strategy and model-parallel sizes as given (before with_defaults fills an axis).
  parallel::StrategySpec strategy_spec() const { return {strategy, pp, tp, cp, ep}; }
};

}  // namespace hlp::train
