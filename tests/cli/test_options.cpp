// hlp-train's option parsing: defaults, INI files, precedence, round trip and errors.
#include "catch_compat.h"
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/error.h"

using hlp::cli::Action;
using hlp::cli::parse_train_args;

namespace {

hlp::cli::ParsedArgs parse(std::vector<std::string> args) {
  args.insert(args.begin(), "hlp-train");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_train_args(static_cast<int>(argv.size()), argv.data());
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/hlp_test_cli_" + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const hlp::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("defaults parse and validate", "[cli]") {
  auto p = parse({});
  CHECK(p.action == Action::Train);
  CHECK(p.config.strategy == hlp::parallel::StrategyKind::single);
  CHECK(p.config.lora_rank == 8);
  CHECK(p.config.data.find("datasets/sample/corpus.txt") != std::string::npos);
}

TEST_CASE("command line values reach the config", "[cli]") {
  auto p = parse({"--strategy", "fsdp2", "--tp", "2", "--seq-len", "512", "--lr", "3e-4",
                  "--activation-checkpointing", "--pattern", "GGAS"});
  CHECK(p.config.strategy == hlp::parallel::StrategyKind::fsdp2);
  CHECK(p.config.tp == 2);
  CHECK(p.config.seq_len == 512);
  CHECK(p.config.lr == Approx(3e-4));
  CHECK(p.config.activation_checkpointing);
  CHECK(p.config.pattern == "GGAS");
}

TEST_CASE("INI file is read and the command line wins", "[cli]") {
  auto ini = write_temp("a.ini", "strategy = ddp\nseq-len = 64\nsteps = 7\n# comment\n");
  auto p = parse({"--config", ini, "--seq-len", "32"});
  CHECK(p.config.strategy == hlp::parallel::StrategyKind::ddp);
  CHECK(p.config.steps == 7);
  CHECK(p.config.seq_len == 32);
}

TEST_CASE("print-config round-trips through --config", "[cli]") {
  auto first = parse({"--strategy", "pp", "--pp", "2", "--pp-split", "0,3", "--lr", "0.001",
                      "--lora-alpha", "32", "--resume", "--checkpoint-dir", "/tmp/ck",
                      "--print-config"});
  CHECK(first.action == Action::PrintConfig);
  auto ini = write_temp("round.ini", hlp::cli::to_ini(first.config));
  auto second = parse({"--config", ini});
  CHECK(hlp::cli::to_ini(second.config) == hlp::cli::to_ini(first.config));
  CHECK(second.config.pp_split == "0,3");
  CHECK(second.config.resume);
}

TEST_CASE("help is an action, not an error", "[cli]") {
  auto p = parse({"--help"});
  CHECK(p.action == Action::Help);
  CHECK(p.help_text.find("--strategy") != std::string::npos);
  CHECK(p.help_text.find("--lora-rank") != std::string::npos);
}

TEST_CASE("errors name the option and the problem", "[cli]") {
  CHECK_THAT(error_of({"--no-such-option"}), Catch::Contains("no-such-option"));
  CHECK_THAT(error_of({"--tp", "two"}), Catch::Contains("tp"));
  CHECK_THAT(error_of({"--strategy", "zero"}), Catch::Contains("--strategy") &&
                                                  Catch::Contains("zero"));
  CHECK_THAT(error_of({"--seq-len", "0"}), Catch::Contains("--seq-len"));
  CHECK_THAT(error_of({"--config", "/nonexistent/x.ini"}), Catch::Contains("/nonexistent/x.ini"));
  CHECK_THAT(error_of({"--config", write_temp("bad.ini", "colour = red\n")}),
             Catch::Contains("colour"));
  CHECK_THAT(error_of({"--config", write_temp("badv.ini", "steps = many\n")}),
             Catch::Contains("steps"));
  CHECK_THAT(error_of({"--resume"}), Catch::Contains("--checkpoint-dir"));
  CHECK_THAT(error_of({"--strategy", "single", "--tp", "2"}), Catch::Contains("single"));
  // a valid configuration gives no error at all
  CHECK(error_of({"--strategy", "ddp"}).empty());
}

TEST_CASE("kernels option: auto by default, lean / reference on request, printed into the INI",
          "[cli]") {
  CHECK(parse({}).config.kernels == hlp::model::Kernels::automatic);
  CHECK(parse({"--kernels", "reference"}).config.kernels == hlp::model::Kernels::reference);
  CHECK(parse({"--kernels", "lean"}).config.kernels == hlp::model::Kernels::lean);
  CHECK(parse({}).config.loss_impl == hlp::model::LossImpl::chunked);
  CHECK(parse({"--loss-impl", "full"}).config.loss_impl == hlp::model::LossImpl::full);
  CHECK(hlp::cli::to_ini(parse({"--loss-impl", "full"}).config).find("loss-impl = full") !=
        std::string::npos);
  CHECK_THAT(error_of({"--loss-impl", "blocked"}), Catch::Contains("--loss-impl"));
  CHECK(parse({}).config.vocab == hlp::model::VocabSource::tokenizer);
  CHECK(parse({"--vocab", "model"}).config.vocab == hlp::model::VocabSource::model);
  CHECK(hlp::cli::to_ini(parse({"--vocab", "model"}).config).find("vocab = model") !=
        std::string::npos);
  CHECK_THAT(error_of({"--vocab", "padded"}), Catch::Contains("--vocab"));
  CHECK(hlp::cli::to_ini(parse({"--kernels", "reference"}).config).find("kernels = reference") !=
        std::string::npos);
  CHECK_THAT(error_of({"--kernels", "fast"}), Catch::Contains("--kernels") &&
                                                  Catch::Contains("auto, fused, lean or reference"));
}

TEST_CASE("attn-impl option: auto by default, the four kernels accepted, others a one-line error",
          "[cli]") {
  CHECK(parse({}).config.attn_impl == hlp::model::AttnImpl::automatic);
  for (const char* impl : {"auto", "naive", "blocked", "sdpa"})
    CHECK(hlp::model::to_string(parse({"--attn-impl", impl}).config.attn_impl) == impl);
  const auto message = error_of({"--attn-impl", "flash"});
  CHECK(message.find("--attn-impl") != std::string::npos);
  CHECK(message.find("auto, naive, blocked or sdpa") != std::string::npos);
}
