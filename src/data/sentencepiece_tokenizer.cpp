// SentencePiece behind the Tokenizer interface. SentencePieceProcessor::Encode is const and
// keeps no per-call state, so one processor serves all loader threads. The processor itself
// lives in libhlp_spm_shim.so, loaded in an isolated scope (spm_shim.h says why).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "common/error.h"
#include "data/spm_shim.h"
#include "data/tokenizer.h"

namespace hlp::data {
namespace {

using CreateFn = SpmProcessor* (*)();

// ASan and TSan abort on RTLD_DEEPBIND (google/sanitizers#611: a deep-bound library would call
// libc's malloc instead of theirs), so their builds load the shim without it. The shim is then
// isolated only while no other protobuf is in the global scope: SentencePiece works in programs
// without LibTorch (hlp-tokenize, the data tests) and is refused beside it, where
// libsentencepiece's protobuf 3.14 would bind to LibTorch's 3.21 and abort.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kDeepBind = false;
#else
constexpr bool kDeepBind = true;
#endif

bool protobuf_in_global_scope() {
  return dlsym(RTLD_DEFAULT, "_ZN6google8protobuf8internal13VerifyVersionEiiPKc") != nullptr;
}

// Where the shim is: $HLP_SPM_SHIM, beside the executable, its ../lib, or the build tree.
CreateFn load_shim() {
  static std::once_flag once;
  static CreateFn create = nullptr;
  static std::string tried;
  static bool refused = false;
  std::call_once(once, [] {
    refused = !kDeepBind && protobuf_in_global_scope();
    if (refused) return;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("HLP_SPM_SHIM")) candidates.push_back(env);
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      std::string dir(exe, size_t(n));
      dir = dir.substr(0, dir.find_last_of('/'));
      candidates.push_back(dir + "/libhlp_spm_shim.so");
      candidates.push_back(dir + "/../lib/libhlp_spm_shim.so");
    }
#ifdef HLP_SPM_SHIM_PATH
    candidates.push_back(HLP_SPM_SHIM_PATH);
#endif
    for (const auto& path : candidates) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | (kDeepBind ? RTLD_DEEPBIND : 0));
      if (!handle) {
        tried += " " + path;
        continue;
      }
      create = reinterpret_cast<CreateFn>(dlsym(handle, "hlp_spm_create"));
      if (create) return;
    }
  });
  if (refused)
    throw user_error("SentencePiece cannot run beside LibTorch in a sanitizer build (its shim "
                     "needs RTLD_DEEPBIND, which ASan/TSan refuse); use a normal build");
  if (!create)
    throw user_error("SentencePiece support library libhlp_spm_shim.so not found (tried:", tried,
                     "); rebuild HLP or set HLP_SPM_SHIM to its path");
  return create;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path)
      : path_(model_path), processor_(load_shim()()) {
    const std::string error = processor_->load(model_path);
    if (!error.empty())
      throw user_error("--tokenizer '", model_path, "' is not a SentencePiece model (", error,
                       "); train one with spm_train or datasets/prepare.sh");
    vocab_size_ = processor_->piece_size();
    // A model without </s> gets one extra id past its vocabulary as end-of-text.
    eot_id_ = processor_->eos_id() >= 0 ? processor_->eos_id() : vocab_size_++;
    // The name identifies the model by content (FNV-1a of its bytes), not by where it lies, so
    // that a cursor saved in one directory resumes from another.
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : processor_->serialized_model()) hash = (hash ^ c) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
    const size_t slash = model_path.find_last_of('/');
    name_ = "sentencepiece:" + model_path.substr(slash == std::string::npos ? 0 : slash + 1) + "#" + hex;
  }

  void encode(std::string_view text, std::vector<int32_t>& ids) const override {
    std::vector<int> pieces;
    const std::string error = processor_->encode(text, &pieces);
    if (!error.empty()) throw std::runtime_error("sentencepiece encode failed: " + error);
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> pieces;
    for (int32_t id : ids)
      if (id != eot_id_ || processor_->eos_id() >= 0) pieces.push_back(id);
    std::string text;
    processor_->decode(pieces, &text);  // best effort, like IgnoreError()
    return text;
  }

  int vocab_size() const override { return vocab_size_; }
  int eot_id() const override { return eot_id_; }
  std::string name() const override { return name_; }

 private:
  std::string path_, name_;
  std::unique_ptr<SpmProcessor> processor_;
  int vocab_size_ = 0;
  int eot_id_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace hlp::data
