#pragma once
// hlp-eval's evaluation: the mean next-token cross-entropy of given token sequences under the
// model and strategy hlp-train would build from the same options (--model-config, --init-from,
// --load-adapter, --base-dtype, any strategy and mesh), without training. Every rank evaluates
// the same sequence; data parallelism only repeats it, pp / tp / cp split it as in training.
#include <cstdint>
#include <memory>
#include <vector>

#include "train/run_context.h"
#include "train/trainer.h"

namespace hlp::train {

struct Session;

struct SequenceLoss {
  double loss = 0;     // mean over the sequence's n - 1 predictions (nats)
  int64_t tokens = 0;  // n - 1
};

class Evaluator {
 public:
  // Collective over ctx.world. tokenizer_vocab: the ids of the tokenizer the sequences came from
  // (0: ids given directly; each is checked against the model's vocabulary).
  Evaluator(const RunContext& ctx, int64_t tokenizer_vocab);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Collective: every rank passes the same ids (at least 2, each in [0, vocab)). With cp > 1 a
  // sequence must hold exactly --seq-len + 1 ids (the context split is made for that length).
  // Throws hlp::UserError naming what is wrong.
  SequenceLoss loss(const std::vector<int64_t>& ids);
  int64_t vocab() const;

 private:
  const RunContext& ctx_;
  TrainHooks hooks_;  // none: nothing is recorded
  std::unique_ptr<Session> session_;
};

}  // namespace hlp::train
