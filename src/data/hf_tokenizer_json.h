#pragma once
// The parts of a Hugging Face `tokenizer.json` that HLP's byte-level BPE tokenizer implements,
// read and checked once. Anything outside this subset is a UserError naming the component:
//
//   normalizer     null | NFC
//   pre_tokenizer  Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)]  (Qwen2/2.5/3)
//                  | ByteLevel(use_regex=true)                                   (GPT-2 regex)
//                  ByteLevel's add_prefix_space must be false
//   model          BPE (vocab + merges by rank), no dropout, no subword prefix / word suffix;
//                  every one of the 256 byte characters must be in the vocabulary
//   added_tokens   matched in the raw text before normalization and pre-tokenization (special
//                  or not, as Hugging Face does); lstrip / rstrip / single_word unsupported
//   post_processor null | ByteLevel (HLP adds no BOS/EOS; the loader appends end-of-text)
//   decoder        ByteLevel
//   truncation, padding  null
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hlp::data {

struct HfAddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // true: matched in the NFC-normalized text instead of the raw text
};

struct HfBpeSpec {
  std::string file_name;                 // base name, for messages and name()
  uint64_t content_hash = 0;             // FNV-1a of the file's bytes
  bool nfc = false;                      // normalizer NFC
  std::string split_regex;               // the pre-tokenizer's regex (Oniguruma/PCRE syntax)
  std::vector<std::string> vocab;        // id -> token in the byte-to-unicode alphabet ("" = hole)
  // Merges in rank order (rank = index): (left id, right id, merged id).
  struct Merge {
    int32_t left, right, merged;
  };
  std::vector<Merge> merges;
  int32_t byte_ids[256] = {};            // id of the token spelling byte b
  bool ignore_merges = false;            // a word that is itself in the vocab skips the merges
  std::vector<HfAddedToken> added_tokens;
  int32_t eot_id = -1;                   // <|endoftext|>
  int32_t vocab_size = 0;                // max id + 1 over vocab and added tokens
};

// Reads and checks `path`. Throws hlp::UserError: missing or unreadable file, invalid JSON,
// an unsupported component (named), a merge naming a token that is not in the vocabulary.
HfBpeSpec load_hf_bpe_spec(const std::string& path);

// GPT-2's reversible map between bytes and printable code points (UTF-8 encoded): byte b is
// spelled byte_to_unicode()[b] in the vocabulary of every byte-level BPE.
const std::vector<std::string>& byte_to_unicode();

}  // namespace hlp::data
