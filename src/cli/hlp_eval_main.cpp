// hlp-eval: the mean next-token loss of token sequences under a checkpoint (and adapter), with
// the model and strategy hlp-train would build from the same options. Rank 0 prints one JSON
// line per sequence and a final one; every strategy and mesh prints the same numbers.
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/launch_env.h"
#include "cli/mpi_main.h"
#include "cli/options.h"
#include "comm/mpi_communicator.h"
#include "common/error.h"
#include "common/log.h"
#include "common/printable.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/hf/config_json.h"
#include "train/data_options.h"
#include "train/device.h"
#include "train/evaluate.h"

namespace {

const char* kHelp =
    "hlp-eval — the mean next-token cross-entropy (nats) of token sequences under a model of\n"
    "HLP (Hybrid-LoRA Parallel): a Hugging Face checkpoint (--model-config, --init-from), an\n"
    "adapter (--load-adapter), or a preset with its seeded weights. The user's perplexity check\n"
    "of a checkpoint or adapter, and HLP's numerical check against transformers.\n\n"
    "Usage:\n"
    "  [mpiexec -n N] hlp-eval --tokens FILE [hlp-train options]\n"
    "      FILE: one sequence per line, token ids separated by blanks (2 or more a line;\n"
    "      empty lines and lines starting with # are skipped)\n"
    "  [mpiexec -n N] hlp-eval --sequences K [--data F --tokenizer T --seq-len N] [hlp-train options]\n"
    "      the first K sequences of --seq-len + 1 tokens that hlp-train's loader yields from\n"
    "      the corpus (its order at --seed)\n\n"
    "Options of its own:\n"
    "  --tokens FILE       sequences of token ids to evaluate\n"
    "  --sequences K       without --tokens: evaluate K sequences of the corpus (default 8)\n"
    "  --help              this text\n"
    "Every other option is hlp-train's, with the same meaning (hlp-train --help): the model\n"
    "(--model, --model-config, --init-from, --load-adapter, --lora-*, --base-dtype, --precision,\n"
    "--kernels, --attn-impl), the strategy and mesh (--strategy, --tp, --pp, --cp, ...), the\n"
    "device (--device, --comm), --threads. Nothing is trained and nothing is written.\n\n"
    "Output (stdout, rank 0), one JSON object a line:\n"
    "  {\"sequence\": i, \"loss\": L, \"tokens\": n}   per sequence: mean over its n = length - 1\n"
    "                                             predictions\n"
    "  {\"mean_loss\": M, \"tokens\": N, \"sequences\": S}  M: over all N predictions (token-weighted)\n"
    "Numbers are printed with 17 significant digits. Under mpiexec every rank evaluates the same\n"
    "sequences; data parallelism repeats them, pp / tp / cp split each one as in training (with\n"
    "--cp every sequence must hold --seq-len + 1 tokens; --tokens sets --seq-len from the first).\n\n"
    "Exit codes: 0 done; 1 internal error; 2 bad input (one line on stderr).\n";

std::FILE* g_json = nullptr;  // the JSON lines (the process's original stdout)

std::string error_line(const hlp::UserError& e) { return hlp::cli::error_line("hlp-eval", e); }

struct EvalArgs {
  std::string tokens;      // --tokens FILE
  int64_t sequences = 8;   // --sequences K
  bool help = false;
  std::vector<std::string> train_args;  // the rest, for hlp-train's parser
};

EvalArgs split_args(int argc, char** argv) {
  EvalArgs a;
  a.train_args.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const std::string& name) -> std::string {
      const std::string eq = "--" + name + "=";
      if (arg.rfind(eq, 0) == 0) return arg.substr(eq.size());
      if (i + 1 >= argc) throw hlp::user_error("--", name, " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--tokens" || arg.rfind("--tokens=", 0) == 0) {
      a.tokens = value("tokens");
    } else if (arg == "--sequences" || arg.rfind("--sequences=", 0) == 0) {
      const std::string v = value("sequences");
      char* end = nullptr;
      const long long k = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || k < 1 || k > 100000000)
        throw hlp::user_error("--sequences '", hlp::printable(v), "' must be a whole number >= 1");
      a.sequences = k;
    } else {
      a.train_args.push_back(arg);
    }
  }
  return a;
}

// --tokens FILE: one sequence a line. Every rank reads the same file.
std::vector<std::vector<int64_t>> read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw hlp::user_error("--tokens: cannot read '", path, "'");
  std::vector<std::vector<int64_t>> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream words(line);
    std::vector<int64_t> ids;
    for (std::string w; words >> w;) {
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(w.c_str(), &end, 10);
      if (*end != '\0' || errno != 0 || id < 0)
        throw hlp::user_error("--tokens ", path, " line ", number, ": '", hlp::printable(w),
                              "' is not a token id (a whole number >= 0)");
      ids.push_back(id);
    }
    if (ids.size() < 2)
      throw hlp::user_error("--tokens ", path, " line ", number, ": ", ids.size(),
                            " token(s); a sequence needs 2 or more");
    out.push_back(std::move(ids));
  }
  if (out.empty()) throw hlp::user_error("--tokens ", path, ": no sequence in the file");
  return out;
}

int run(const EvalArgs& args, hlp::train::TrainConfig config,
        const std::shared_ptr<hlp::comm::MpiCommunicator>& world) {
  std::vector<std::vector<int64_t>> sequences;
  int64_t tokenizer_vocab = 0;
  if (!args.tokens.empty()) {
    // A preset's vocabulary is its tokenizer's (--tokenizer); a checkpoint's is its own.
    if (config.model_config.empty())
      tokenizer_vocab = hlp::data::make_tokenizer(config.tokenizer)->vocab_size();
    sequences = read_token_file(args.tokens);
    config.seq_len = int(sequences.front().size()) - 1;  // pp's split and cp's layout use it
  }
  config.micro_batch = 1;
  hlp::train::RunContext ctx = hlp::train::resolve_run_context(config, world);
  ctx.log = hlp::Log("hlp-eval", world->rank());
  if (args.tokens.empty()) {  // the corpus: the loader's first K rows, the same on every rank
    hlp::data::DataOptions d = hlp::train::data_options_for(ctx.config);
    d.global_batch = 1;
    d.loader_threads = 1;
    hlp::data::Loader loader(d, /*dp_rank=*/0, /*dp_size=*/1);
    tokenizer_vocab = loader.vocab_size();
    for (int64_t k = 0; k < args.sequences; ++k) {
      const hlp::data::Batch b = loader.next();
      sequences.emplace_back(b.tokens.begin(), b.tokens.end());
    }
  }
  hlp::train::Evaluator evaluator(ctx, tokenizer_vocab);
  double sum = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const hlp::train::SequenceLoss r = evaluator.loss(sequences[i]);
    sum += r.loss * double(r.tokens);
    tokens += r.tokens;
    if (world->rank() == 0) {
      std::fprintf(g_json, "{\"sequence\": %zu, \"loss\": %.17g, \"tokens\": %lld}\n", i,
                   r.loss, (long long)r.tokens);
      std::fflush(g_json);
    }
  }
  if (world->rank() == 0)
    std::fprintf(g_json, "{\"mean_loss\": %.17g, \"tokens\": %lld, \"sequences\": %zu}\n",
                 sum / double(tokens), (long long)tokens, sequences.size());
  std::fflush(g_json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries the JSON lines only: every notice (the loading lines of the Log, libraries'
  // messages) goes to stderr, and the JSON to what stdout was.
  std::fflush(stdout);
  const int json_fd = dup(STDOUT_FILENO);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  g_json = json_fd >= 0 ? fdopen(json_fd, "w") : stderr;
  H5dont_atexit();
  const int rank = hlp::cli::launcher_rank();
  EvalArgs args;
  hlp::cli::ParsedArgs parsed;
  try {
    args = split_args(argc, argv);
    if (args.help) {
      if (rank == 0) std::fputs(kHelp, g_json);
      return 0;
    }
    std::vector<const char*> train_argv;
    for (const auto& a : args.train_args) train_argv.push_back(a.c_str());
    parsed = hlp::cli::parse_train_args(int(train_argv.size()), train_argv.data());
    if (parsed.action != hlp::cli::Action::Train)
      throw hlp::user_error("--print-config is hlp-train's (hlp-eval --help)");
    // Bad files fail here, before MPI starts: one line, exit 2 on every rank.
    if (args.tokens.empty()) hlp::data::make_tokenizer(parsed.config.tokenizer);
    else read_token_file(args.tokens);
    if (!parsed.config.model_config.empty())
      hlp::model::hf::read_hf_config(parsed.config.model_config);
    hlp::train::check_device_request(parsed.config.device, parsed.config.comm);
  } catch (const hlp::UserError& e) {
    if (rank == 0) std::fprintf(stderr, "%s\n", error_line(e).c_str());
    return 2;
  }
  return hlp::cli::run_on_mpi_world(
      "hlp-eval", argc, argv, parsed.config.comm_timeout_s,
      [&](const std::shared_ptr<hlp::comm::MpiCommunicator>& world) {
        return run(args, parsed.config, world);
      });
}
