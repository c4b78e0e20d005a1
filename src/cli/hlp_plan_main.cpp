// hlp-plan: which strategies fit, and which is fastest, before spending GPU hours (issue 24).
// Takes hlp-train's model, data-shape, LoRA, precision, checkpointing, attention and kernel
// options (or --config FILE.ini), plus its own --ranks, --gpu, --strategies and --format;
// prints every candidate's predicted per-rank peak (parameters, gradients, optimizer, working
// set, activations, communication buffers, reserve), whether it fits, its predicted step time
// and tokens/s, ranked. The method and its numbers: src/train/plan.h.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/error.h"
#include "common/printable.h"
#include "data/tokenizer.h"
#include "metrics/cpu_allocator_counter.h"
#include "model/config.h"
#include "model/hf/config_json.h"
#include "model/lora_config.h"
#include "train/plan.h"

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

const char* kUsage =
    "hlp-plan: predict memory per rank and step time of every strategy before running it\n"
    "\n"
    "usage: hlp-plan [hlp-train options] [--ranks N[,N...]] [--gpu TYPE] [--strategies LIST]\n"
    "                [--format table|csv]\n"
    "  --ranks N,...       world sizes to plan for (default 2); with N >= 2, `single` on one\n"
    "                      rank is listed for reference\n"
    "  --gpu TYPE          v100-16 | v100-32 | a100-40 | a100-80 | h100-80 | h200 | l40s-48 |\n"
    "                      cpu (this machine's memory shared by the ranks; default)\n"
    "  --strategies LIST   comma-separated subset of single,ddp,fsdp,fsdp2,pp,tp,cp (default:\n"
    "                      every strategy and mesh the rank count allows: pipeline schedules,\n"
    "                      dp x pp, dp x tp, dp x cp included)\n"
    "  --format F          table (markdown, ranked; default) or csv\n"
    "hlp-train's options (--model, --seq-len, --global-batch, --micro-batch, --lora-rank,\n"
    "--precision, --activation-checkpointing, --pp-split, --cp-layout, --config FILE.ini ...)\n"
    "describe the run; see hlp-train --help. The layer kinds' activations are probed on this\n"
    "machine's CPU at short lengths and extrapolated (src/train/plan.h says what is modelled).\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace hlp;
  try {
    std::vector<std::string> ranks_text{"2"};
    std::string gpu = "cpu", strategies, format = "table";
    std::vector<const char*> rest{argv[0]};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&](const char* option) {
        const std::string prefix = std::string(option) + "=";
        if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
        if (i + 1 >= argc) throw user_error(option, " needs a value");
        return std::string(argv[++i]);
      };
      auto is = [&](const char* option) {
        return a == option || a.rfind(std::string(option) + "=", 0) == 0;
      };
      if (a == "--help" || a == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (is("--ranks")) {
        ranks_text = split_list(value("--ranks"));
      } else if (is("--gpu")) {
        gpu = value("--gpu");
      } else if (is("--strategies")) {
        strategies = value("--strategies");
      } else if (is("--format")) {
        format = value("--format");
      } else {
        rest.push_back(argv[i]);
      }
    }
    if (format != "table" && format != "csv")
      throw user_error("--format must be table or csv (got ", format, ")");
    std::vector<int> ranks;
    for (const auto& r : ranks_text) {
      char* end = nullptr;
      const long n = std::strtol(r.c_str(), &end, 10);
      if (end == r.c_str() || *end != '\0' || n < 1 || n > 65536)
        throw user_error("--ranks takes world sizes from 1 to 65536 (got '", r, "')");
      ranks.push_back(int(n));
    }
    const auto wanted = split_list(strategies);
    for (const auto& s : wanted)
      if (s != "single" && s != "ddp" && s != "fsdp" && s != "fsdp2" && s != "pp" && s != "tp" &&
          s != "cp")
        throw user_error("--strategies: unknown strategy '", s, "' (single, ddp, fsdp, fsdp2, pp, tp, cp)");
    auto parsed = cli::parse_train_args(int(rest.size()), rest.data());
    if (parsed.action == cli::Action::Help) {
      std::cout << kUsage;
      return 0;
    }
    const train::TrainConfig& c = parsed.config;

    metrics::CpuAllocatorCounter::install();  // the probe measures with it
    train::PlanInputs in;
    in.train = c;
    if (c.model_config.empty()) {
      in.model = model::resolve_model_config(c.model, c.pattern, c.gdn_mode)
                     .with_vocab(data::make_tokenizer(c.tokenizer)->vocab_size());
    } else {
      in.model = model::hf::read_hf_config(c.model_config).config;
      in.model.gdn_mode = model::parse_gdn_mode(c.gdn_mode);
    }
    in.model.activation_checkpointing = c.activation_checkpointing;
    in.model.kernels = model::parse_kernels(c.kernels);
    in.model.attn_impl = model::parse_attn_impl(c.attn_impl);
    // the probe runs here, on the CPU: auto / sdpa resolve to the blocked kernel (linear memory,
    // as sdpa's flash / memory-efficient kernels on a GPU)
    if (in.model.attn_impl != model::AttnImpl::naive) in.model.attn_impl = model::AttnImpl::blocked;
    in.lora = model::make_lora_config(c.lora_rank, c.lora_alpha, c.lora_dropout, c.lora_targets);
    for (size_t i = 0; i < ranks.size(); ++i) {
      in.device = train::plan_device(gpu, c.precision, ranks[i]);
      const auto candidates = train::plan_candidates(ranks[i], in.model, c, wanted);
      const auto rows = train::plan(in, candidates);
      const std::string text = train::format_plan(rows, in, format == "csv");
      // one CSV header for all rank counts
      if (format == "csv" && i > 0) std::cout << text.substr(text.find('\n') + 1);
      else std::cout << text << (format == "table" ? "\n" : "");
    }
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "hlp-plan: error: %s\n", printable(e.what(), std::string::npos).c_str());
    return 2;
  }
}
