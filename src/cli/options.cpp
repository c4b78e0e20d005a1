#include "cli/options.h"

#include <boost/program_options.hpp>
#include <cmath>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "cli/program_options_error.h"
#include "common/enum_names.h"
#include "common/error.h"
#include "common/printable.h"
#include "model/config.h"
#include "parallel/registry.h"

namespace po = boost::program_options;

namespace hlp::cli {
namespace {

std::string format_value(const std::string& v) { return v; }
std::string format_value(bool v) { return v ? "true" : "false"; }
std::string format_value(double v) {
  std::ostringstream os;
  os << std::setprecision(std::numeric_limits<double>::max_digits10) << v;
  std::string s = os.str();
  // keep INI readable: 0.001 rather than 0.0010000000000000000208
  std::ostringstream shortest;
  shortest << std::setprecision(15) << v;
  return std::stod(shortest.str()) == v ? shortest.str() : s;
}
template <typename T>
std::string format_value(T v) {
  return std::to_string(v);
}

// One table of options: registers each with Boost and remembers how to print it back.
class OptionTable {
 public:
  explicit OptionTable(train::TrainConfig& config) : config_(config) {}

  template <typename T>
  void add(po::options_description& group, const char* name, T train::TrainConfig::*field,
           const char* help) {
    T* target = &(config_.*field);
    group.add_options()(name, po::value<T>(target)->default_value(*target, format_value(*target)),
                        help);
    printers_.push_back([name, field](const train::TrainConfig& c) {
      return std::string(name) + " = " + format_value(c.*field);
    });
  }

  // A choice parsed once into its enum (`parse` throws UserError naming the option and the
  // choices); printed back with `print`.
  template <typename E>
  void add_choice(po::options_description& group, const char* name, E train::TrainConfig::*field,
                  E (*parse)(const std::string&), const char* (*print)(E),
                  const std::string& help) {
    E* target = &(config_.*field);
    group.add_options()(name,
                        po::value<std::string>()
                            ->default_value(print(*target))
                            ->notifier([target, parse](const std::string& text) {
                              *target = parse(text);
                            }),
                        help.c_str());
    printers_.push_back([name, field, print](const train::TrainConfig& c) {
      return std::string(name) + " = " + print(c.*field);
    });
  }

  void add_flag(po::options_description& group, const char* name,
                bool train::TrainConfig::*field, const char* help) {
    bool* target = &(config_.*field);
    group.add_options()(name,
                        po::value<bool>(target)
                            ->default_value(*target, format_value(*target))
                            ->implicit_value(true, "true"),
                        help);
    printers_.push_back([name, field](const train::TrainConfig& c) {
      return std::string(name) + " = " + format_value(c.*field);
    });
  }

  std::string ini(const train::TrainConfig& c) const {
    std::string out;
    for (const auto& p : printers_) out += p(c) + "\n";
    return out;
  }

 private:
  train::TrainConfig& config_;
  std::vector<std::function<std::string(const train::TrainConfig&)>> printers_;
};

// Parsers and printers of the option enums that have a names table.
const char* print_precision(model::Precision p) { return model::to_string(p); }
model::BaseDtype parse_base_dtype(const std::string& t) { return model::parse_base_dtype(t); }
const char* print_base_dtype(model::BaseDtype d) { return model::to_string(d); }
model::Precision parse_precision(const std::string& t) { return model::parse_precision(t); }
model::GdnMode parse_gdn_mode(const std::string& t) { return model::parse_gdn_mode(t); }
const char* print_gdn_mode(model::GdnMode m) { return enum_name(m, model::kGdnModeNames); }
model::Kernels parse_kernels(const std::string& t) { return model::parse_kernels(t); }
const char* print_kernels(model::Kernels k) { return enum_name(k, model::kKernelsNames); }
model::LossImpl parse_loss_impl(const std::string& t) { return model::parse_loss_impl(t); }
const char* print_loss_impl(model::LossImpl l) { return enum_name(l, model::kLossImplNames); }
model::VocabSource parse_vocab(const std::string& t) { return model::parse_vocab_source(t); }
const char* print_vocab(model::VocabSource v) { return enum_name(v, model::kVocabSourceNames); }
model::AttnImpl parse_attn_impl(const std::string& t) { return model::parse_attn_impl(t); }
const char* print_attn_impl(model::AttnImpl a) { return enum_name(a, model::kAttnImplNames); }
parallel::StrategyKind parse_strategy(const std::string& t) { return parallel::parse_strategy(t); }
const char* print_strategy(parallel::StrategyKind k) { return parallel::to_string(k); }
parallel::PipeSchedule parse_schedule(const std::string& t) {
  return parallel::parse_pipe_schedule(t);
}
const char* print_schedule(parallel::PipeSchedule s) { return parallel::to_string(s); }
parallel::CpLayout parse_cp_layout(const std::string& t) { return parallel::parse_cp_layout(t); }
const char* print_cp_layout(parallel::CpLayout l) { return parallel::to_string(l); }
parallel::CpScheme parse_cp_scheme(const std::string& t) { return parallel::parse_cp_scheme(t); }
const char* print_cp_scheme(parallel::CpScheme s) { return parallel::to_string(s); }
parallel::CpAttention parse_cp_attention(const std::string& t) {
  return parallel::parse_cp_attention(t);
}
const char* print_cp_attention(parallel::CpAttention s) { return parallel::to_string(s); }
train::DeviceKind parse_device(const std::string& t) {
  return parse_enum("device", t, train::kDeviceKindNames);
}
const char* print_device(train::DeviceKind d) { return train::to_string(d); }
train::CommBackend parse_comm(const std::string& t) {
  return parse_enum("comm", t, train::kCommBackendNames);
}
const char* print_comm(train::CommBackend c) { return train::to_string(c); }

// --strategy's help from the registry: what a rank holds under each, and what combines.
std::string strategy_help() {
  std::string names, holds, composes;
  for (const auto& e : parallel::strategy_entries()) {
    names += std::string(names.empty() ? "" : " | ") + e.name;
    holds += std::string(holds.empty() ? "" : "; ") + e.name + ": " + e.holds;
    if (!e.composes_with.empty()) composes += std::string(composes.empty() ? "" : ", ") + e.name;
  }
  std::string axes, not_with;
  for (const auto& a : parallel::axis_entries()) {
    axes += std::string(axes.empty() ? "" : "/") + "--" + a.name;
    for (const auto& pair : a.not_with)
      not_with += std::string("; --") + a.name + " with --" +
                  parallel::axis_entry(pair.first).name + " is not implemented";
  }
  return names + ". " + holds + ". " + composes + " compose with " + axes + not_with +
         "; the data-parallel size is what remains of the world size";
}

struct Descriptions {
  po::options_description visible{"hlp-train options", 100};
  po::options_description command_only{"Command", 100};
};

void describe(OptionTable& t, Descriptions& d) {
  using C = train::TrainConfig;
  po::options_description par("Parallelism (world size comes from mpiexec / srun)", 100);
  t.add_choice(par, "strategy", &C::strategy, parse_strategy, print_strategy, strategy_help());
  t.add(par, "tp", &C::tp,
        "tensor-parallel size (innermost mesh axis); --strategy tp without it uses every rank");
  t.add(par, "pp", &C::pp,
        "pipeline-parallel size; --strategy pp without it uses every rank (per tp group)");
  t.add(par, "cp", &C::cp,
        "context-parallel size: every sequence is split along T over cp ranks (G layers pass "
        "their delta-rule state between ranks, S layers a window halo, A layers ring attention); "
        "composes with ddp, fsdp2 and --tp; --strategy cp without it uses every rank (per tp group)");
  t.add_choice(par, "cp-scheme", &C::cp_scheme, parse_cp_scheme, print_cp_scheme,
        "how the Gated DeltaNet layers' state reaches the later pieces under --cp: chain (each "
        "rank waits for the state of the piece before it: cp - 1 hops, LASP-1) | allgather (one "
        "all-gather of every piece's d_k x d_k transition and state, each rank merges the prefix "
        "it needs; backward the mirror: LASP-2 / fla) | alltoall (no state exchange: q, k, v and "
        "the gates re-sharded from tokens to heads by one all-to-all, each rank runs the whole "
        "sequence for its heads, the output back: DeepSpeed-Ulysses; the heads must divide by cp)");
  t.add_choice(par, "cp-attention", &C::cp_attention, parse_cp_attention, print_cp_attention,
        "how the attention and sliding-window layers see the earlier pieces under --cp: ring "
        "(full attention: the key / value blocks travel the cp ring; sliding window: a halo of "
        "window - 1 keys and values) | alltoall (q, k, v re-sharded from tokens to heads, the "
        "layer's own attention over the whole sequence for its heads, the output back; KV heads "
        "fewer than cp are repeated; the query heads must divide by cp)");
  t.add(par, "ep", &C::ep,
        "expert-parallel size: every mixture-of-experts layer's routed experts split over ep "
        "ranks carved out of the data-parallel (x cp) ranks, tokens dispatched to their experts "
        "and back by all-to-all (dropless); the rest of the model as ddp or fsdp2 holds it; "
        "must divide the experts and dp x cp");
  t.add_choice(par, "cp-layout", &C::cp_layout, parse_cp_layout, print_cp_layout,
        "which pieces of the sequence a cp rank holds: zigzag (2 cp pieces, rank r holds r and "
        "2cp-1-r: equal causal-attention work on every rank) | contiguous (piece r)");
  t.add(par, "pp-split", &C::pp_split,
        "pipeline stage split: uniform (layer count) | params (trainable parameter count, as "
        "DeepSpeed) | balanced (per-layer cost model) | profiled (per-layer-kind times measured "
        "at start) | L0,L1,... (first layer of each stage)");
  t.add_choice(par, "pp-schedule", &C::pp_schedule, parse_schedule, print_schedule,
        "pipeline schedule: gpipe | 1f1b | interleaved (Megatron's interleaved 1F1B, needs "
        "--pp-virtual) | zb-h1 (zero bubble H1: backward split into input- and weight-gradient "
        "passes, W deferred into the bubble)");
  t.add(par, "pp-virtual", &C::pp_virtual,
        "model chunks per pipeline stage for --pp-schedule interleaved (V >= 2; the split "
        "applies to the pp x V chunks; micro-batches a multiple of --pp)");
  t.add(par, "micro-batches", &C::micro_batches,
        "micro-batches per step per data-parallel rank (M); 0 = global-batch / (dp * micro-batch)");
  t.add(par, "bucket-mb", &C::bucket_mb, "DDP gradient bucket size in MiB");
  t.add(par, "comm-timeout-s", &C::comm_timeout_s,
        "seconds a collective may wait for its peers before the job aborts with an error");
  t.add_choice(par, "comm", &C::comm, parse_comm, print_comm,
        "communication backend: auto (nccl for --device cuda, mpi for cpu) | nccl (CUDA "
        "tensors, one GPU per rank) | mpi (CPU tensors; CUDA tensors are staged through "
        "pinned host memory, so several ranks may share one GPU)");

  po::options_description model("Model", 100);
  std::string presets;  // the list the preset lookup knows, so the help cannot go stale
  for (const auto& name : model::preset_names()) presets += (presets.empty() ? "" : " | ") + name;
  const std::string model_help = "preset: " + presets;
  t.add(model, "model", &C::model, model_help.c_str());
  t.add(model, "pattern", &C::pattern,
        "layer pattern overriding the preset, one letter a layer: G gated-delta linear, "
        "A full attention, S sliding-window attention (e.g. GGGAGGGS)");
  t.add_choice(model, "gdn-mode", &C::gdn_mode, parse_gdn_mode, print_gdn_mode,
        "Gated DeltaNet core: chunked (parallel, default) | recurrent (token-by-token reference)");
  t.add(model, "model-config", &C::model_config,
        "Hugging Face config.json (or its directory) of a Jet-Nemotron, Qwen2, Qwen3.5 or "
        "Qwen3-Next (dense or mixture-of-experts) model; replaces --model "
        "(docs/hf-checkpoints.md)");
  t.add(model, "init-from", &C::init_from,
        "start from pretrained weights: a model directory, a .safetensors file or a "
        "model.safetensors.index.json (Hugging Face names); each rank reads only what it holds");
  t.add_choice(model, "kernels", &C::kernels, parse_kernels, print_kernels,
        "auto (default: fused on the CPU, lean on CUDA; recorded resolved) | fused (fused CPU "
        "kernels for RMSNorm, SwiGLU and the G layers; float32 / float64 without autocast, "
        "elsewhere the reference runs) | lean (memory-lean ATen operations that keep their "
        "inputs and recompute the rest in backward; CPU and CUDA, any precision) | reference "
        "(the op-by-op modules)");
  t.add_choice(model, "loss-impl", &C::loss_impl, parse_loss_impl, print_loss_impl,
        "chunked (default: the LM head and cross entropy over token chunks, never holding the "
        "[T, V] logits or their gradient) | full (the whole logits tensor, the reference)");
  t.add_choice(model, "attn-impl", &C::attn_impl, parse_attn_impl, print_attn_impl,
        "attention kernel of the A and S layers: auto (sdpa on CUDA with LibTorch >= 2, else "
        "blocked) | naive (materialises T x T, the reference) | blocked (flash-style tiles, "
        "linear memory) | sdpa");
  t.add_flag(model, "activation-checkpointing", &C::activation_checkpointing,
             "recompute each block's activations in backward instead of storing them");

  po::options_description ft("Finetuning", 100);
  t.add(ft, "lora-rank", &C::lora_rank, "LoRA rank r; 0 = full finetune (every weight trains)");
  t.add(ft, "lora-alpha", &C::lora_alpha, "LoRA alpha (adapter scale alpha / r)");
  t.add(ft, "lora-dropout", &C::lora_dropout, "dropout on the adapter input");
  t.add(ft, "lora-targets", &C::lora_targets,
        "comma-separated module-name suffixes that get adapters (PEFT-style), or re:REGEX");
  t.add(ft, "load-adapter", &C::load_adapter,
        "start from a PEFT LoRA adapter directory (its r, lora_alpha, lora_dropout and "
        "target_modules replace the --lora-* values)");
  t.add(ft, "save-adapter", &C::save_adapter,
        "write the trained adapter in PEFT format (adapter_model.safetensors + "
        "adapter_config.json) to this directory at the end, and into each checkpoint");
  t.add(ft, "save-merged", &C::save_merged,
        "write the merged weights (W + alpha/r B A) as model.safetensors with Hugging Face names "
        "(+ the --model-config config.json) to this directory at the end");

  po::options_description data("Data", 100);
  t.add(data, "data", &C::data,
        "training text: a file, a directory or a glob of .txt (blank-line separated documents) "
        "and .jsonl files; default: the sample corpus shipped in datasets/sample");
  t.add(data, "jsonl-field", &C::jsonl_field, "field of each .jsonl object holding the text");
  t.add(data, "tokenizer", &C::tokenizer, "byte (no files needed) | FILE.model (SentencePiece) | FILE.json (Hugging Face "
        "byte-level BPE, e.g. build/datasets/qwen3/tokenizer.json); its vocabulary sets the model's");
  t.add_choice(data, "vocab", &C::vocab, parse_vocab, print_vocab,
        "tokenizer (default: a preset's embedding, LM head and logits have the tokenizer's "
        "rows; its own padded size when the tokenizer is the model's) | model (the preset's "
        "own vocabulary whatever the tokenizer, e.g. qwen3.5-9b's 248,320 rows fed by the "
        "shipped Qwen3 tokenizer's ids: the real model's memory and time). --model-config: "
        "the checkpoint's vocab_size always");
  t.add(data, "loader-threads", &C::loader_threads, "tokenizer threads per rank");
  t.add(data, "queue-depth", &C::queue_depth, "packed sequences buffered ahead per rank");
  t.add(data, "seq-len", &C::seq_len, "tokens per sequence (T)");
  t.add(data, "micro-batch", &C::micro_batch, "sequences per micro-batch per data-parallel rank (B)");
  t.add(data, "global-batch", &C::global_batch,
        "sequences per optimizer step over all ranks (G = dp * B * micro-batches)");

  po::options_description run("Run", 100);
  t.add(run, "steps", &C::steps, "optimizer steps");
  t.add(run, "warmup-steps", &C::warmup_steps, "linear LR warm-up steps, then cosine decay");
  t.add(run, "lr", &C::lr, "peak learning rate (AdamW)");
  t.add(run, "min-lr-ratio", &C::min_lr_ratio, "final LR as a fraction of --lr");
  t.add(run, "weight-decay", &C::weight_decay, "AdamW weight decay");
  t.add(run, "grad-clip", &C::grad_clip, "clip the global gradient norm to this value; 0 = off");
  t.add_choice(run, "precision", &C::precision, parse_precision, print_precision,
        "fp32 | bf16 | fp16: bf16 and fp16 compute with fp32 master weights of what trains, "
        "fp32 gradient reduction and Adam state (frozen matrices: --base-dtype). fp16 adds dynamic loss scaling (an overflow skips the update "
        "and halves the scale). On CPU, bf16 is LibTorch's CPU autocast; fp16 has no CPU kernels "
        "in LibTorch, so its matmuls (all projections, LoRA, LM head) are emulated: fp16-rounded "
        "operands, results and gradients, fp32 accumulation; the rest runs in fp32 "
        "(docs/strategies.md, Precision)");
  t.add_choice(run, "base-dtype", &C::base_dtype, parse_base_dtype, print_base_dtype,
               "storage of the frozen weight matrices (projections, embedding, LM head): auto "
               "(the compute dtype of --precision: bf16 under bf16, fp16 under fp16, else fp32) "
               "| fp32 | bf16 | fp16. Adapters (and everything under full finetuning) stay fp32 "
               "masters with fp32 gradients and AdamW state; frozen vectors and convolution "
               "kernels stay fp32. bf16 / fp16 need the same --precision (weights are used as "
               "stored, never cast per step); the resolved value is recorded");
  t.add(run, "loss-scale-init", &C::loss_scale_init,
        "fp16: initial dynamic loss scale (as torch.cuda.amp.GradScaler)");
  t.add(run, "loss-scale-growth-interval", &C::loss_scale_growth_interval,
        "fp16: steps without overflow after which the loss scale doubles");
  t.add_choice(run, "device", &C::device, parse_device, print_device,
        "auto (cuda when LibTorch has CUDA and a GPU is visible, else cpu) | cpu | cuda. "
        "On cuda each rank takes GPU local_rank % visible GPUs (local rank from MPI's "
        "shared-memory split)");
  t.add(run, "seed", &C::seed, "seed for weights, LoRA init, data order and dropout");
  t.add(run, "threads", &C::threads,
        "compute threads per rank; bounds every pool: LibTorch intra-/inter-op, OpenMP and the "
        "BLAS library's own pool (OpenBLAS). 0 = auto: SLURM_CPUS_PER_TASK, else the affinity "
        "mask, else the node's cores / ranks on the node");
  t.add(run, "eval-every", &C::eval_every, "evaluation loss every K steps; 0 = off");
  t.add(run, "out", &C::out, "result file (HDF5) to write; empty = none");
  t.add_flag(run, "allow-overcommit", &C::allow_overcommit,
             "run even when a rank's predicted peak (held bytes + predicted activations) needs "
             "more memory than it may still use: the GPU's memory, or on a CPU the cgroup limit "
             "or MemAvailable shared by the node's ranks (without it: one line, exit 2)");
  t.add(run, "flush-every", &C::flush_every, "flush the result file every K steps");
  t.add(run, "result-reserve-kib", &C::result_reserve_kib,
        "space held beside the result file (OUT.reserve) for a disk that fills up: the trace is "
        "dropped and the steps go on in it; then a last part lets the last flush complete. "
        "-1 = sized for --steps; 0 = none (a write that fails may leave the file's last flush "
        "half-written)");
  t.add_flag(run, "trace", &C::trace, "record trace events (compute / comm / data lanes)");
  t.add(run, "checkpoint-dir", &C::checkpoint_dir, "directory for checkpoints; empty = none");
  t.add(run, "checkpoint-every", &C::checkpoint_every,
        "checkpoint every K steps (0 = only on SIGTERM/SIGUSR1 and at the end)");
  t.add_flag(run, "resume", &C::resume, "resume from the newest checkpoint in --checkpoint-dir, appending to this run's --out file "
             "(its steps before the checkpoint kept; another run's file is refused)");

  d.command_only.add_options()("help,h", "print this help and exit")(
      "config", po::value<std::string>(), "read options from this INI file (command line wins)")(
      "print-config", "print the resolved configuration as INI and exit");
  d.visible.add(d.command_only).add(par).add(model).add(ft).add(data).add(run);
}

void require_positive(const char* name, long long v) {
  if (v < 1) throw user_error("--", name, " must be >= 1 (got ", v, ")");
}

}  // namespace

void validate(const train::TrainConfig& c) {
  require_positive("cp", c.cp);
  require_positive("ep", c.ep);
  require_positive("pp-virtual", c.pp_virtual);
  if (!(c.loss_scale_init >= 1) || !std::isfinite(c.loss_scale_init))
    throw user_error("--loss-scale-init must be a finite number >= 1 (got ", c.loss_scale_init,
                     ")");
  require_positive("loss-scale-growth-interval", c.loss_scale_growth_interval);
  model::resolve_base_dtype(c.base_dtype, c.precision);  // a combination that cannot run
  if (c.comm == train::CommBackend::nccl && c.device == train::DeviceKind::cpu)
    throw user_error("--comm nccl moves CUDA tensors and needs --device cuda (or auto on a "
                     "GPU); use --comm mpi or auto with --device cpu");
  require_positive("tp", c.tp);
  require_positive("pp", c.pp);
  require_positive("seq-len", c.seq_len);
  require_positive("micro-batch", c.micro_batch);
  require_positive("global-batch", c.global_batch);
  require_positive("steps", c.steps);
  if (c.threads < 0) throw user_error("--threads must be >= 0 (0 = auto; got ", c.threads, ")");
  require_positive("loader-threads", c.loader_threads);
  require_positive("queue-depth", c.queue_depth);
  require_positive("flush-every", c.flush_every);
  if (c.result_reserve_kib < -1)
    throw user_error("--result-reserve-kib must be -1 (auto), 0 (none) or a size in KiB (got ",
                     c.result_reserve_kib, ")");
  if (c.micro_batches < 0)
    throw user_error("--micro-batches must be >= 0 (got ", c.micro_batches, ")");
  if (!c.model_config.empty() && !c.pattern.empty())
    throw user_error("--pattern cannot change a --model-config model (its checkpoint has the "
                     "config's layers); drop --pattern");
  if (!c.save_adapter.empty() && c.lora_rank == 0 && c.load_adapter.empty())
    throw user_error("--save-adapter needs LoRA (--lora-rank > 0)");
  if (c.lora_rank < 0) throw user_error("--lora-rank must be >= 0 (got ", c.lora_rank, ")");
  if (c.lora_dropout < 0 || c.lora_dropout >= 1)
    throw user_error("--lora-dropout must be in [0, 1) (got ", c.lora_dropout, ")");
  if (!(c.lr > 0)) throw user_error("--lr must be > 0 (got ", c.lr, ")");
  if (c.min_lr_ratio < 0 || c.min_lr_ratio > 1)
    throw user_error("--min-lr-ratio must be in [0, 1] (got ", c.min_lr_ratio, ")");
  if (c.grad_clip < 0) throw user_error("--grad-clip must be >= 0 (got ", c.grad_clip, ")");
  if (c.warmup_steps < 0) throw user_error("--warmup-steps must be >= 0 (got ", c.warmup_steps, ")");
  if (!(c.bucket_mb > 0)) throw user_error("--bucket-mb must be > 0 (got ", c.bucket_mb, ")");
  if (!(c.comm_timeout_s > 0))
    throw user_error("--comm-timeout-s must be > 0 (got ", c.comm_timeout_s, ")");
  parallel::check_composition(c.strategy_spec());  // which strategies and axes combine
  if (c.resume && c.checkpoint_dir.empty())
    throw user_error("--resume needs --checkpoint-dir");
}

ParsedArgs parse_train_args(int argc, const char* const* argv) {
  ParsedArgs parsed;
#ifdef HLP_DEFAULT_DATA
  parsed.config.data = HLP_DEFAULT_DATA;
#endif
  OptionTable table(parsed.config);
  Descriptions d;
  describe(table, d);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(d.visible).run(), vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw user_error("--config: cannot read '", path, "' (no such file or not readable)");
      try {
        po::store(po::parse_config_file(in, d.visible, /*allow_unregistered=*/false), vm);
      } catch (po::error& e) {
        // Boost quotes the file's keys and values: they may be any bytes (printable()).
        throw user_error("--config ", path, ": ", printable(program_options_message(e)));
      }
    }
    po::notify(vm);
  } catch (po::error& e) {
    throw user_error(printable(program_options_message(e)), " (see hlp-train --help)");
  }
  if (vm.count("help")) {
    std::ostringstream os;
    os << "hlp-train — one MPI-launched training job of HLP (Hybrid-LoRA Parallel).\n"
          "Runs one parallel strategy on a hybrid-attention LM with LoRA, streams and tokenizes\n"
          "text lazily, and writes metrics and traces into one HDF5 result file.\n\n"
          "Usage: mpiexec -n N hlp-train [--config FILE.ini] [options]\n"
          "Every option may also be given in the INI file as `name = value`.\n\n"
       << d.visible
       << "\nExit codes: 0 done; 1 internal error; 2 bad input (one line on stderr, every rank);\n"
          "3 non-finite loss or gradient norm (the result file keeps the steps before it);\n"
          "74 the result or checkpoint file could not be written (disk full, quota, I/O error:\n"
          "   the line names the file and the reason; the result file keeps the steps flushed\n"
          "   before and the previous checkpoint stays usable);\n"
          "75 stopped by SIGTERM/SIGUSR1 after a checkpoint (requeue to resume);\n"
          "124 a collective exceeded --comm-timeout-s (a peer rank died or hung).\n";
    parsed.action = Action::Help;
    parsed.help_text = os.str();
    return parsed;
  }
  if (vm.count("print-config")) parsed.action = Action::PrintConfig;
  validate(parsed.config);
  return parsed;
}

std::string to_ini(const train::TrainConfig& config) {
  train::TrainConfig scratch;
  OptionTable table(scratch);
  Descriptions d;
  describe(table, d);
  return "# hlp-train resolved configuration\n" + table.ini(config);
}

std::string identity_ini(const train::TrainConfig& config) {
  static const std::set<std::string> launch_only = {
      "steps",          "resume",       "out",         "checkpoint-dir", "checkpoint-every",
      "flush-every",    "result-reserve-kib", "trace", "loader-threads", "queue-depth",
      "threads",        "allow-overcommit",   "comm-timeout-s", "eval-every", "save-adapter",
      "save-merged"};
  std::istringstream in(to_ini(config));
  std::string identity;
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos && launch_only.count(line.substr(0, eq))) continue;
    identity += line + "\n";
  }
  return identity;
}

}  // namespace hlp::cli
