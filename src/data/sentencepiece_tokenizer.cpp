// SentencePiece behind the Tokenizer interface. SentencePieceProcessor::Encode is const and
// keeps no per-call state, so one processor serves all loader threads.
#include <sentencepiece_processor.h>

#include <cstdio>

#include "common/error.h"
#include "data/tokenizer.h"

namespace hlp::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path) : path_(model_path) {
    const auto status = processor_.Load(model_path);
    if (!status.ok())
      throw user_error("--tokenizer '", model_path, "' is not a SentencePiece model (",
                       status.ToString(), "); train one with spm_train or datasets/prepare.sh");
    vocab_size_ = processor_.GetPieceSize();
    // A model without </s> gets one extra id past its vocabulary as end-of-text.
    eot_id_ = processor_.eos_id() >= 0 ? processor_.eos_id() : vocab_size_++;
    // The name identifies the model by content (FNV-1a of its bytes), not by where it lies, so
    // that a cursor saved in one directory resumes from another.
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : processor_.serialized_model_proto()) hash = (hash ^ c) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
    const size_t slash = model_path.find_last_of('/');
    name_ = "sentencepiece:" + model_path.substr(slash == std::string::npos ? 0 : slash + 1) + "#" + hex;
  }

  void encode(std::string_view text, std::vector<int32_t>& ids) const override {
    std::vector<int> pieces;
    const auto status = processor_.Encode(absl::string_view(text.data(), text.size()), &pieces);
    if (!status.ok()) throw std::runtime_error("sentencepiece encode failed: " + status.ToString());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> pieces;
    for (int32_t id : ids)
      if (id != eot_id_ || processor_.eos_id() >= 0) pieces.push_back(id);
    std::string text;
    processor_.Decode(pieces, &text).IgnoreError();
    return text;
  }

  int vocab_size() const override { return vocab_size_; }
  int eot_id() const override { return eot_id_; }
  std::string name() const override { return name_; }

 private:
  std::string path_, name_;
  sentencepiece::SentencePieceProcessor processor_;
  int vocab_size_ = 0;
  int eot_id_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace hlp::data
