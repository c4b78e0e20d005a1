#include "data/unicode_text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "common/error.h"
#include "common/printable.h"

namespace hlp::data {

std::string_view to_nfc(std::string_view text, std::string& storage) {
  // UTF-8 lead bytes below 0xCC start code points below U+0300: all of them are NFC_QC=Yes with
  // combining class 0, so such text is NFC and needs no normalizer (ASCII, Latin-1, ...).
  bool simple = true;
  for (unsigned char c : text)
    if (c >= 0xCC) {
      simple = false;
      break;
    }
  if (simple) return text;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU NFC unavailable: ") + u_errorName(status));
  const icu::StringPiece piece(text.data(), int32_t(text.size()));
  if (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  storage.clear();
  icu::StringByteSink<std::string> sink(&storage, int32_t(text.size()));
  nfc->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU NFC failed: ") + u_errorName(status));
  return storage;
}

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;  // for messages
};

namespace {

// Budgets of one match attempt, in PCRE2's backtracking steps (the match limit; the depth
// limit bounds the interpreter's nesting alike). Real pre-tokenizer regexes take a few steps
// per byte they scan (Qwen3's: 1 to 3 on a megabyte of spaces, JIT or not), almost always far
// fewer than kQuickMatchSteps; a regex that backtracks catastrophically needs exponentially
// many ((\p{L}+)+$ on a word). So each attempt runs with the quick budget first, and one that
// exceeds it runs once more with a budget linear in the rest of the text: a long legitimate run
// still matches, a catastrophic regex fails within a second. With PCRE2's default (10 million
// steps per attempt) such a regex spent 20-150 ms on every word below that and ran for minutes
// before some longer word exceeded it (36 s on one 46 kB document of 22-letter words).
constexpr uint32_t kQuickMatchSteps = 100'000;
constexpr uint64_t kMatchStepsPerByte = 16;

uint32_t linear_match_steps(size_t text_bytes) {
  const uint64_t steps = uint64_t(kQuickMatchSteps) + kMatchStepsPerByte * uint64_t(text_bytes);
  return uint32_t(std::min<uint64_t>(steps, UINT32_MAX));
}

// The errors a regex gets from one of the limits above, or from the JIT stack (4 MiB) that
// bounds its nesting: the file's regex is at fault, not HLP.
const char* resource_limit_name(int rc) {
  switch (rc) {
    case PCRE2_ERROR_MATCHLIMIT: return "match limit";
    case PCRE2_ERROR_DEPTHLIMIT: return "depth limit";
    case PCRE2_ERROR_HEAPLIMIT: return "heap limit";
    case PCRE2_ERROR_JIT_STACKLIMIT: return "JIT stack limit";
    default: return nullptr;
  }
}

// Per-thread match state: the match data and a JIT stack big enough for long runs of one class.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = [this] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(c, nullptr, stack);
    return c;
  }();
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  impl_->pattern = pattern;
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw user_error("pre-tokenizer regex '", printable(pattern), "' is not supported by PCRE2 (",
                     reinterpret_cast<const char*>(message), " at offset ", offset, ")");
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(impl_->code); }

void RegexSplitter::split_impl(std::string_view text, void (*emit)(void*, size_t, size_t), void* ctx) const {
  thread_local ThreadMatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  auto match_from = [&](size_t from, uint32_t step_budget) {
    pcre2_set_match_limit(state.context, step_budget);
    pcre2_set_depth_limit(state.context, step_budget);
    return impl_->jit
        ? pcre2_jit_match(impl_->code, subject, n, from, 0, state.data, state.context)
        : pcre2_match(impl_->code, subject, n, from, PCRE2_NO_UTF_CHECK, state.data, state.context);
  };
  size_t gap_start = 0, search = 0;
  while (search < n) {
    int rc = match_from(search, kQuickMatchSteps);
    if (resource_limit_name(rc)) rc = match_from(search, linear_match_steps(n - search));
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (const char* limit = resource_limit_name(rc))
      throw user_error("the pre-tokenizer regex '", printable(impl_->pattern), "' hit PCRE2's ",
                       limit, " (catastrophic backtracking) matching from byte ", search, " of a ",
                       n, "-byte text; simplify the regex (nested quantifiers such as (a+)+ "
                       "backtrack exponentially)");
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw std::runtime_error(std::string("pre-tokenizer regex match failed: ") +
                               reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t start = ov[0], end = ov[1];
    if (end == start) {  // an empty match: it stays in the gap; search on from the next character
      search = start + 1;
      while (search < n && (static_cast<unsigned char>(text[search]) & 0xC0) == 0x80) ++search;
      continue;
    }
    if (start > gap_start) emit(ctx, gap_start, start - gap_start);
    emit(ctx, start, end - start);
    gap_start = search = end;
  }
  if (gap_start < n) emit(ctx, gap_start, n - gap_start);
}

}  // namespace hlp::data
