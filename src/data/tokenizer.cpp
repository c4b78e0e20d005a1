#include "data/tokenizer.h"

#include <sys/stat.h>

#include "common/error.h"

namespace hlp::data {

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const std::string& tokenizer_json_path);

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& ids) const {
  ids.reserve(ids.size() + text.size());
  for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c));
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id == kEndOfText)
      text += "<|endoftext|>";
    else if (id >= 0 && id < 256)
      text += static_cast<char>(id);
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec.empty() || spec == "byte") return std::make_unique<ByteTokenizer>();
  struct stat st {};
  if (stat(spec.c_str(), &st) != 0)
    throw user_error("--tokenizer '", spec, "': no such file; give 'byte', a SentencePiece "
                     ".model file (e.g. datasets/sample/spm.model) or a Hugging Face tokenizer.json");
  if (!S_ISREG(st.st_mode))
    throw user_error("--tokenizer '", spec, "' is not a regular file; give 'byte', a "
                     "SentencePiece .model file or a Hugging Face tokenizer.json");
  const bool json = spec.size() >= 5 && spec.compare(spec.size() - 5, 5, ".json") == 0;
  return json ? make_bpe_tokenizer(spec) : make_sentencepiece_tokenizer(spec);
}

}  // namespace hlp::data
