#include "data/cursor.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace hlp::data {

std::string Cursor::serialize() const {
  nlohmann::json j;
  j["version"] = 1;
  j["step"] = step;
  j["global_batch"] = global_batch;
  j["seq_len"] = seq_len;
  j["seed"] = seed;
  j["corpus_bytes"] = corpus_bytes;
  j["block_bytes"] = block_bytes;
  j["tokenizer"] = tokenizer;
  nlohmann::json lanes_json = nlohmann::json::array();
  for (const auto& [lane, p] : lanes)
    lanes_json.push_back({{"lane", lane}, {"epoch", p.epoch}, {"block", p.block},
                          {"offset", p.offset}, {"skip", p.skip_tokens}});
  j["lanes"] = lanes_json;
  return j.dump();
}

Cursor Cursor::parse(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw user_error("data cursor is not valid JSON: '", text.substr(0, 80), "'");
  Cursor c;
  try {
    if (j.at("version").get<int>() != 1)
      throw user_error("data cursor version ", j.at("version").dump(), " is not supported (1)");
    c.step = j.at("step").get<int64_t>();
    c.global_batch = j.at("global_batch").get<int>();
    c.seq_len = j.at("seq_len").get<int>();
    c.seed = j.at("seed").get<uint64_t>();
    c.corpus_bytes = j.at("corpus_bytes").get<uint64_t>();
    c.block_bytes = j.at("block_bytes").get<uint64_t>();
    c.tokenizer = j.at("tokenizer").get<std::string>();
    for (const auto& l : j.at("lanes")) {
      LanePosition p;
      p.epoch = l.at("epoch").get<int64_t>();
      p.block = l.at("block").get<int64_t>();
      p.offset = l.at("offset").get<uint64_t>();
      p.skip_tokens = l.at("skip").get<int64_t>();
      c.lanes[l.at("lane").get<int>()] = p;
    }
  } catch (const nlohmann::json::exception& e) {
    throw user_error("data cursor is missing a field or has a wrong type (", e.what(), ")");
  }
  if (c.step < 0 || c.global_batch < 1 || c.seq_len < 1)
    throw user_error("data cursor has impossible values (step ", c.step, ", global_batch ",
                     c.global_batch, ", seq_len ", c.seq_len, ")");
  return c;
}

void Cursor::merge(const Cursor& other) {
  if (other.step != step || other.global_batch != global_batch || other.seq_len != seq_len ||
      other.seed != seed || other.corpus_bytes != corpus_bytes ||
      other.block_bytes != block_bytes || other.tokenizer != tokenizer)
    throw user_error("cannot merge data cursors of different streams or steps (step ", step,
                     " vs ", other.step, ")");
  for (const auto& [lane, p] : other.lanes) lanes[lane] = p;
}

}  // namespace hlp::data
