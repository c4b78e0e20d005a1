// hlp-tokenize: the ids HLP's loader gives a jsonl file's texts, for checking data and for tests.
//
//   hlp-tokenize [--tokenizer byte|FILE.model|FILE.json] [--jsonl-field text] INPUT.jsonl
//       one JSON array of ids per record, in order (the ids of the text alone: the loader
//       appends the tokenizer's end-of-text id after each document)
//   hlp-tokenize --decode [--tokenizer ...] [--jsonl-field text] IDS.jsonl
//       the reverse: one JSON array of ids a line in, one {"text": ...} object a line out
//
// INPUT may be '-' for stdin. Blank lines are skipped. Like the loader, invalid UTF-8 is
// replaced by U+FFFD before tokenizing. A line that is not what the mode needs, an id outside
// the vocabulary, or a bad tokenizer file: one line on stderr naming it, exit 2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

namespace {

struct Args {
  std::string tokenizer = "byte";
  std::string field = "text";
  std::string input;
  bool decode = false;
};

constexpr const char* kUsage =
    "usage: hlp-tokenize [--tokenizer byte|FILE.model|FILE.json] [--jsonl-field NAME] [--decode] "
    "INPUT.jsonl|-\n"
    "  encode (default): one JSON array of ids per jsonl record (the NAME field, default text)\n"
    "  --decode: one JSON array of ids a line in, one {NAME: text} object a line out\n";

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw hlp::user_error(arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--tokenizer") a.tokenizer = value();
    else if (arg == "--jsonl-field") a.field = value();
    else if (arg == "--decode") a.decode = true;
    else if (arg == "-h" || arg == "--help") { std::fputs(kUsage, stdout); std::exit(0); }
    else if (arg.size() > 1 && arg[0] == '-') throw hlp::user_error("unknown option '", arg, "' (see --help)");
    else if (!a.input.empty()) throw hlp::user_error("one INPUT only (got '", a.input, "' and '", arg, "')");
    else a.input = arg;
  }
  if (a.input.empty()) throw hlp::user_error("no INPUT given (see --help)");
  return a;
}

void run(const Args& a) {
  const auto tok = hlp::data::make_tokenizer(a.tokenizer);
  std::ifstream file;
  if (a.input != "-") {
    file.open(a.input, std::ios::binary);
    if (!file) throw hlp::user_error("cannot read '", a.input, "'");
  }
  std::istream& in = a.input == "-" ? std::cin : file;
  std::string line, out;
  std::vector<int32_t> ids;
  for (long line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto where = [&] { return a.input + ":" + std::to_string(line_no) + ": "; };
    const nlohmann::json j = nlohmann::json::parse(hlp::data::repair_utf8(line), nullptr, false);
    if (j.is_discarded()) throw hlp::user_error(where(), "not valid JSON");
    if (a.decode) {
      if (!j.is_array()) throw hlp::user_error(where(), "not a JSON array of ids");
      ids.clear();
      for (const auto& id : j) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tok->vocab_size())
          throw hlp::user_error(where(), "id ", hlp::printable(id.dump()), " is not in [0, ",
                                tok->vocab_size(), ")");
        ids.push_back(id.get<int32_t>());
      }
      out = nlohmann::json{{a.field, tok->decode(ids)}}.dump();
    } else {
      if (!j.is_object() || !j.contains(a.field) || !j[a.field].is_string())
        throw hlp::user_error(where(), "no string field \"", a.field, "\" (--jsonl-field)");
      ids.clear();
      tok->encode(j[a.field].get<std::string>(), ids);
      out = nlohmann::json(ids).dump();
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const hlp::UserError& e) {
    // One line of valid UTF-8 whatever the message quotes (printable(), no cut).
    const std::string line = hlp::printable(e.what(), std::string::npos);
    std::fprintf(stderr, "hlp-tokenize: error: %s\n", line.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hlp-tokenize: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
