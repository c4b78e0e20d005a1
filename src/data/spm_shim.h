#pragma once
// SentencePiece lives in its own shared object (libhlp_spm_shim.so), loaded with dlopen
// (RTLD_LOCAL | RTLD_DEEPBIND) on first use.
//
// Why: Debian's libsentencepiece exports a private copy of protobuf-lite 3.14, LibTorch links
// the system libprotobuf 3.21. Linked into one executable, the dynamic linker binds one
// library's protobuf calls to the other's copy and the process crashes before main(). Isolated
// in a local, deep-bound scope, each library keeps its own protobuf. The interface below is
// virtual, so calls cross the boundary through the vtable and need no symbol lookup.
#include <string>
#include <string_view>
#include <vector>

namespace hlp::data {

class SpmProcessor {
 public:
  virtual ~SpmProcessor() = default;
  virtual std::string load(const std::string& path) = 0;  // "" on success, else the error
  virtual int piece_size() const = 0;
  virtual int eos_id() const = 0;
  virtual std::string serialized_model() const = 0;
  virtual std::string encode(std::string_view text, std::vector<int>* ids) const = 0;  // "" = ok
  virtual std::string decode(const std::vector<int>& ids, std::string* text) const = 0;
};

}  // namespace hlp::data

// Exported by the shim: a new processor (delete it through the virtual destructor).
extern "C" hlp::data::SpmProcessor* hlp_spm_create();
