#pragma once
// One interface for every tokenizer the loader can use. Implementations are immutable after
// construction, so encode() may be called from many loader threads at once.
//
//   "byte"            ByteTokenizer: ids 0..255 are the UTF-8 bytes, 256 is <|endoftext|>.
//   "path/x.model"    SentencePieceTokenizer (libsentencepiece); end-of-text = the model's </s>.
//   "path/x.json"     byte-level BPE of a Hugging Face tokenizer.json (bpe_tokenizer.cpp, e.g.
//                     Qwen3's); end-of-text = <|endoftext|>; text of an added token inside a
//                     document encodes to that token's id, as in Hugging Face.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hlp::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `ids` (no end-of-text; the loader adds it after each document).
  virtual void encode(std::string_view text, std::vector<int32_t>& ids) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;  // every id is in [0, vocab_size)
  virtual int eot_id() const = 0;      // separates packed documents
  // "byte", "sentencepiece:<file name>#<content hash>" or "hf-bpe:<file name>#<content hash>";
  // recorded in cursors and results.
  virtual std::string name() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kEndOfText = 256;
  void encode(std::string_view text, std::vector<int32_t>& ids) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return 257; }
  int eot_id() const override { return kEndOfText; }
  std::string name() const override { return "byte"; }
};

// spec: "byte", a path to a Hugging Face tokenizer.json (name ends in .json) or to a
// SentencePiece .model file. Throws hlp::UserError for a missing file, one that is not a
// SentencePiece model, or a tokenizer.json HLP cannot run (the message names the component).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace hlp::data
