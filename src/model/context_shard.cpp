#include "model/context_shard.h"

#include "common/error.h"

namespace hlp::model {

int SeqLayout::owner(int piece) const {
  if (!zigzag) return piece;
  return piece < ranks ? piece : 2 * ranks - 1 - piece;
}

std::vector<SeqPiece> SeqLayout::pieces_of(int r) const {
  std::vector<int> indices{r};
  if (zigzag) indices.push_back(2 * ranks - 1 - r);
  std::vector<SeqPiece> pieces;
  int64_t local = 0;
  for (int i : indices) {
    pieces.push_back({i, int64_t(i) * piece_len(), piece_len(), local});
    local += piece_len();
  }
  return pieces;
}

torch::Tensor SeqLayout::positions(const torch::Device& device) const {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<torch::Tensor> parts;
  for (const auto& p : local_pieces()) parts.push_back(torch::arange(p.begin, p.end(), opts));
  return torch::cat(parts);
}

torch::Tensor SeqLayout::slice(const torch::Tensor& full) const {
  std::vector<torch::Tensor> parts;
  for (const auto& p : local_pieces()) parts.push_back(full.narrow(1, p.begin, p.length));
  return parts.size() == 1 ? parts[0].contiguous() : torch::cat(parts, 1);
}

SeqLayout make_seq_layout(int64_t seq_len, int ranks, int rank, bool zigzag) {
  SeqLayout l{seq_len, ranks, rank, zigzag};
  const int pieces = l.piece_count();
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw std::logic_error("make_seq_layout: rank outside the cp group");
  if (seq_len % pieces != 0 || seq_len / pieces < 1)
    throw user_error("--seq-len ", seq_len, " cannot be cut into ", pieces, " equal pieces (cp ",
                     ranks, zigzag ? ", zigzag layout: 2 pieces a rank" : "",
                     "); use a multiple of ", pieces);
  return l;
}

namespace {
thread_local ContextShard* current = nullptr;
}

ContextShard* current_context_shard() { return current; }

ContextShardScope::ContextShardScope(ContextShard* shard) : previous_(current) { current = shard; }

ContextShardScope::~ContextShardScope() { current = previous_; }

}  // namespace hlp::model
