// The only file that includes SentencePiece: built into libhlp_spm_shim.so (see spm_shim.h).
#include <sentencepiece_processor.h>

#include "data/spm_shim.h"

namespace {

class Processor final : public hlp::data::SpmProcessor {
 public:
  std::string load(const std::string& path) override {
    const auto status = processor_.Load(path);
    return status.ok() ? std::string() : status.ToString();
  }
  int piece_size() const override { return processor_.GetPieceSize(); }
  int eos_id() const override { return processor_.eos_id(); }
  std::string serialized_model() const override { return processor_.serialized_model_proto(); }
  std::string encode(std::string_view text, std::vector<int>* ids) const override {
    const auto status = processor_.Encode(absl::string_view(text.data(), text.size()), ids);
    return status.ok() ? std::string() : status.ToString();
  }
  std::string decode(const std::vector<int>& ids, std::string* text) const override {
#ifdef ABSL_TYPES_SPAN_H_
    // SentencePiece 0.2.1 on (Debian sid's 0.2.2) takes the ids as absl::Span (its header
    // includes <absl/types/span.h>) and deprecates the std::vector overload; 0.1.97 (Debian 12)
    // and 0.2.0 (Debian 13) have only the std::vector one and no Abseil.
    const auto status = processor_.Decode(absl::MakeConstSpan(ids), text);
#else
    const auto status = processor_.Decode(ids, text);
#endif
    return status.ok() ? std::string() : status.ToString();
  }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) hlp::data::SpmProcessor* hlp_spm_create() {
  return new Processor();
}
