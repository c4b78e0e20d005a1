#pragma once
// The data layer's options for a training configuration: one place for the trainer and the tools
// that must see exactly the batches hlp-train sees (bench/train/export_init.cpp).
#include "data/loader.h"
#include "train/config.h"

namespace hlp::train {

inline data::DataOptions data_options_for(const TrainConfig& c) {
  data::DataOptions d;
  d.path = c.data;
  d.tokenizer = c.tokenizer;
  d.jsonl_field = c.jsonl_field;
  d.seq_len = c.seq_len;
  d.global_batch = c.global_batch;
  d.seed = c.seed;
  d.loader_threads = c.loader_threads;
  d.queue_depth = c.queue_depth;
  return d;
}

}  // namespace hlp::train
