#pragma once
// Limits on every model config (preset, --pattern or a Hugging Face config.json), checked by
// ModelConfig::validate() and while config.json is read, before anything is allocated: a
// hostile file fails with one message instead of a division by zero or an OOM kill.
#include <cstdint>

namespace hlp::model {

// Layers; the largest public LLMs have ~100-200.
inline constexpr int64_t kMaxLayers = 4096;
// Any width, head count, head dim, vocab, window, convolution width or chunk size (2^20). A
// product of three such sizes (heads x head dim x conv width) stays below 2^60, inside int64.
inline constexpr int64_t kMaxDimension = int64_t(1) << 20;
// The fp32 bytes of all parameters: 2^40 B = 1 TiB, about 275 B parameters.
inline constexpr int64_t kMaxParameterBytes = int64_t(1) << 40;

}  // namespace hlp::model
