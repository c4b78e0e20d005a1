#include "train/evaluate.h"

#include "common/error.h"
#include "model/context_shard.h"
#include "train/session.h"

namespace hlp::train {

Evaluator::Evaluator(const RunContext& ctx, int64_t tokenizer_vocab)
    : ctx_(ctx) {
  session_ = open_eval_session(ctx, hooks_, tokenizer_vocab);
}

Evaluator::~Evaluator() = default;

int64_t Evaluator::vocab() const { return session_->options.model.vocab; }

SequenceLoss Evaluator::loss(const std::vector<int64_t>& ids) {
  const int64_t n = int64_t(ids.size());
  if (n < 2) throw user_error("a sequence of ", n, " token(s) has nothing to predict (2 or more)");
  if (session_->cp_shard && n != int64_t(ctx_.config.seq_len) + 1)
    throw user_error("with --cp ", ctx_.spec.cp, " every sequence must hold --seq-len + 1 = ",
                     ctx_.config.seq_len + 1, " tokens (the context split is made for that "
                     "length); this one holds ", n);
  const int64_t vocab = this->vocab();
  for (int64_t i = 0; i < n; ++i)
    if (ids[size_t(i)] < 0 || ids[size_t(i)] >= vocab)
      throw user_error("token id ", ids[size_t(i)], " (position ", i, ") is outside the model's "
                       "vocabulary [0, ", vocab, ")");
  data::Batch batch;
  batch.rows = 1;
  batch.cols = int(n);
  batch.tokens = ids;
  batch.global_rows = {0};
  const auto micro = to_micro_batches(batch, session_->split, session_->device(),
                                      session_->cp_shard.get());
  // the model's forward runs on this rank's pieces (as in training's step loop)
  model::ContextShardScope cp_scope(session_->cp_shard.get());
  model::ExpertShardScope ep_scope(session_->ep_shard.get());
  return {session_->strategy->eval_loss(micro), n - 1};
}

}  // namespace hlp::train
