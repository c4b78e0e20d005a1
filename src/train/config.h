#pragma once
// The resolved configuration of one hlp-train job. Plain data: filled by the CLI (src/cli),
// read by the trainer and strategies, printed back as INI into every result file.
#include <cstdint>
#include <string>

namespace hlp::train {

struct TrainConfig {
  // parallelism
  std::string strategy = "single";  // single|ddp|fsdp|fsdp2|pp|tp|cp
  int tp = 1;                       // tensor-parallel size (composes with a dp strategy)
  int pp = 1;                       // pipeline-parallel size
  std::string pp_split = "balanced";  // uniform|params|balanced|L0,L1,...
  std::string pp_schedule = "1f1b";   // gpipe|1f1b|interleaved|zb-h1
  int pp_virtual = 1;                 // model chunks per stage (interleaved)
  int cp = 1;                         // context-parallel size: the sequence split over cp ranks
  std::string cp_layout = "zigzag";   // zigzag|contiguous: which pieces of T a cp rank holds
  int micro_batches = 0;              // M; 0 = derived from global / (dp * micro_batch)
  double bucket_mb = 25.0;            // DDP gradient bucket size
  double comm_timeout_s = 300.0;
  std::string comm = "auto";        // auto|nccl|mpi: auto = nccl on CUDA, mpi on CPU (train/device.h)

  // model
  std::string model = "tiny";
  std::string pattern;              // overrides the preset's layer pattern when non-empty
  std::string gdn_mode = "chunked";  // chunked|recurrent
  std::string kernels = "fused";     // fused|reference (fused CPU kernels or op-by-op modules)
  std::string attn_impl = "auto";    // auto|naive|blocked|sdpa
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
  std::string precision = "fp32";   // fp32|bf16|fp16
  double loss_scale_init = 65536.0;  // fp16: first dynamic loss scale (train/loss_scaler.h)
  int loss_scale_growth_interval = 2000;  // fp16: clean steps before the scale doubles
  std::string device = "auto";      // auto|cpu|cuda: auto = cuda when usable, else cpu (train/device.h)
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
};

}  // namespace hlp::train
