#include "parallel/sharded_unit.h"

#include "parallel/strategy_util.h"

namespace hlp::parallel {

namespace {
// The storage's own allocator (CPU, or the CUDA caching allocator) gives it `nbytes` fresh,
// uninitialised bytes, or takes them all back (nbytes 0). at::native::resize_bytes_cpu does the
// same but copies the old bytes with memcpy, which is CPU-only; FSDP never needs the old bytes
// (a gather overwrites them all), so this one works on every device. On CUDA the freed block
// goes back to the caching allocator on the compute stream, which is also where every later
// user of it runs (comm/cuda_timing.h), so no stream bookkeeping is needed.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "FSDP: the parameter's storage is not resizable");
  at::DataPtr fresh;
  if (nbytes > 0) fresh = storage->allocator()->allocate(nbytes);
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}
}  // namespace

void free_storage(const torch::Tensor& t) {
  resize_storage_bytes(t.storage().unsafeGetStorageImpl(), 0);
}

void alloc_storage(const torch::Tensor& t, int64_t nbytes) {
  if (int64_t(t.storage().nbytes()) != nbytes)
    resize_storage_bytes(t.storage().unsafeGetStorageImpl(), size_t(nbytes));
}

torch::Tensor storage_alias(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  return at::empty({0}, t.options().requires_grad(false))
      .set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

namespace {

enum class GatherState { Released, Gathering, Gathered };

// ---------------------------------------------------------------- FSDP1: one flat buffer
class FlatUnit : public ShardedUnit {
 public:
  FlatUnit(NamedParams params, std::shared_ptr<comm::Communicator> comm,
           const Materialise& materialise)
      : params_(std::move(params)), comm_(std::move(comm)) {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : params_) {
      offsets_.push_back(numel_);
      trainable_.push_back(p.requires_grad());
      numel_ += p.numel();
    }
    const int n = comm_->size();
    range_ = comm::shard_range(numel_, n, comm_->rank());
    // The unit lives where its parameters get their values (materialise may move them to the
    // GPU); an empty unit where its communicator's small tensors live.
    fp32_ = torch::TensorOptions().dtype(torch::kFloat).device(comm_->scalar_device());
    if (params_.empty()) full_ = torch::empty({0}, fp32_);
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i].second;
      if (materialise) materialise(params_[i].first, p);
      if (i == 0) {
        fp32_ = fp32_.device(p.device());
        full_ = torch::empty({numel_}, fp32_);  // [N] all parameters of the unit
      }
      // p's own bytes are dropped by set_data below: one whole parameter beyond full_ at a time
      full_.narrow(0, offsets_[i], p.numel()).copy_(p.detach().reshape(-1));
      p.set_data(full_.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
      // FSDP1's FlatParameter requires grad as a whole: frozen weights get gradients too.
      p.requires_grad_(true);
    }
    shard_ = torch::zeros({comm::shard_numel(numel_, n)}, fp32_);  // [ceil(N/n)]
    shard_.narrow(0, 0, range_.size()).copy_(full_.narrow(0, range_.begin, range_.size()));
    shard_grad_ = torch::zeros_like(shard_);
    gather_alias_ = storage_alias(full_);
    release();
  }

  void issue_gather() override {
    if (state_ != GatherState::Released) return;
    alloc_storage(full_, numel_ * int64_t(sizeof(float)));
    work_ = comm_->all_gather_async(shard_, gather_alias_);
    state_ = GatherState::Gathering;
  }
  void wait_gather() override {
    issue_gather();
    if (state_ == GatherState::Gathering) wait_for(work_);
    work_.reset();
    state_ = GatherState::Gathered;
  }
  void release() override {
    free_storage(full_);
    state_ = GatherState::Released;
  }
  void prepare_grads() override {
    full_grad_ = torch::zeros({numel_}, fp32_);  // [N]: the whole flat buffer gets a gradient
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i].second;
      p.mutable_grad() = full_grad_.narrow(0, offsets_[i], p.numel()).view(p.sizes());
    }
  }
  void reduce_grads() override {
    rs_out_ = torch::empty_like(shard_);
    rs_work_ = comm_->reduce_scatter_async(full_grad_, rs_out_, comm::ReduceOp::Avg);
  }
  void finish_grads() override {
    if (!rs_work_) return;
    wait_for(rs_work_);
    rs_work_.reset();
    shard_grad_.add_(rs_out_);
    for (auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
    full_grad_ = torch::Tensor();
    rs_out_ = torch::Tensor();
  }
  std::vector<OptimSlot> optim_slots() override {
    // Only the originally trainable elements inside this rank's range are optimised.
    std::vector<OptimSlot> slots;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!trainable_[i]) continue;
      const int64_t lo = std::max(offsets_[i], range_.begin);
      const int64_t hi = std::min(offsets_[i] + params_[i].second.numel(), range_.end);
      if (hi <= lo) continue;
      slots.push_back({params_[i].first + "[flat " + std::to_string(lo - offsets_[i]) + ":" +
                           std::to_string(hi - offsets_[i]) + "]",
                       shard_.narrow(0, lo - range_.begin, hi - lo),
                       shard_grad_.narrow(0, lo - range_.begin, hi - lo)});
    }
    return slots;
  }
  void zero_grad() override { shard_grad_.zero_(); }
  int64_t param_bytes() const override { return shard_.nbytes(); }
  int64_t grad_bytes() const override { return shard_grad_.nbytes(); }
  std::vector<model::hf::HeldTensor> held_tensors() const override {
    throw user_error("--strategy fsdp (flat parameters) cannot load or save weights by name "
                     "(--init-from, --load-adapter, --save-adapter); use fsdp2");
  }

 private:
  NamedParams params_;
  std::shared_ptr<comm::Communicator> comm_;
  std::vector<int64_t> offsets_;
  std::vector<bool> trainable_;
  int64_t numel_ = 0;
  comm::ShardRange range_;
  torch::Tensor full_, gather_alias_, shard_, shard_grad_, full_grad_, rs_out_;
  torch::TensorOptions fp32_;  // float32 on the parameters' device
  comm::WorkPtr work_, rs_work_;
  GatherState state_ = GatherState::Gathered;
};

// ---------------------------------------------------------------- FSDP2: per parameter
class PerParamUnit : public ShardedUnit {
 public:
  PerParamUnit(NamedParams params, std::shared_ptr<comm::Communicator> comm,
               const Materialise& materialise)
      : comm_(std::move(comm)) {
    torch::NoGradGuard no_grad;
    const int n = comm_->size(), r = comm_->rank();
    // Where the parameters get their values (materialise may move them to the GPU).
    fp32_ = torch::TensorOptions().dtype(torch::kFloat).device(comm_->scalar_device());
    for (auto& [name, p] : params) {
      if (materialise) materialise(name, p);
      fp32_ = fp32_.device(p.device());
      Entry e;
      e.name = name;
      e.param = p;
      e.trainable = p.requires_grad();
      e.d0 = p.dim() == 0 ? 1 : p.size(0);
      e.rest = e.d0 == 0 ? 0 : p.numel() / e.d0;
      e.rows = comm::shard_numel(e.d0, n);  // ceil(d0 / n) rows a rank
      // own storage of exactly this parameter's size (so it can be freed on its own); a
      // parameter that already has one (every HybridLM parameter) is not copied
      const bool own = p.is_contiguous() && p.storage_offset() == 0 &&
                       int64_t(p.storage().nbytes()) == p.numel() * int64_t(p.element_size()) &&
                       p.storage().use_count() == 1;
      if (!own) p.set_data(p.detach().clone().contiguous());
      e.alias = storage_alias(p);
      e.shard = torch::zeros({e.rows, e.rest}, fp32_);  // [ceil(d0/n), rest], zero padded
      const auto valid = comm::shard_range(e.d0, n, r);
      if (valid.size() > 0)
        e.shard.narrow(0, 0, valid.size())
            .copy_(p.detach().reshape({e.d0, e.rest}).narrow(0, valid.begin, valid.size()));
      free_storage(e.param);  // the whole parameter goes now, before the next one is built
      e.gather_offset = gather_numel_;
      gather_numel_ += e.rows * e.rest;
      if (e.trainable) {
        e.shard_grad = torch::zeros_like(e.shard);
        e.grad_offset = grad_numel_;
        grad_numel_ += e.rows * e.rest;
      }
      entries_.push_back(std::move(e));
    }
    release();
  }

  void issue_gather() override {
    if (state_ != GatherState::Released) return;
    for (auto& e : entries_) alloc_storage(e.param, e.param.numel() * int64_t(sizeof(float)));
    // copy-in: this rank's shards back to back, [S]
    std::vector<torch::Tensor> parts;
    for (auto& e : entries_) parts.push_back(e.shard.reshape(-1));
    send_ = parts.empty() ? torch::zeros({0}, fp32_) : torch::cat(parts);
    recv_ = torch::empty({comm_->size() * gather_numel_}, fp32_);  // [n * S]
    work_ = comm_->all_gather_async(send_, recv_);
    state_ = GatherState::Gathering;
  }
  void wait_gather() override {
    issue_gather();
    if (state_ == GatherState::Gathering) {
      wait_for(work_);
      work_.reset();
      // copy-out: rank q's block of each parameter -> rows [q*rows, q*rows + valid)
      torch::NoGradGuard no_grad;
      auto by_rank = recv_.view({comm_->size(), gather_numel_});
      for (auto& e : entries_) {
        auto full = e.alias.view({e.d0, e.rest});
        for (int q = 0; q < comm_->size(); ++q) {
          const int64_t valid = std::min(e.rows, std::max<int64_t>(0, e.d0 - q * e.rows));
          if (valid == 0) continue;
          full.narrow(0, q * e.rows, valid)
              .copy_(by_rank[q].narrow(0, e.gather_offset, valid * e.rest).view({valid, e.rest}));
        }
      }
      send_ = recv_ = torch::Tensor();
    }
    state_ = GatherState::Gathered;
  }
  void release() override {
    for (auto& e : entries_) free_storage(e.param);
    state_ = GatherState::Released;
  }
  void prepare_grads() override {}  // autograd allocates full gradients of trainable params
  void reduce_grads() override {
    if (grad_numel_ == 0) return;
    const int n = comm_->size();
    // copy-in: [n, S_t], rank q's segment holds rows [q*rows, (q+1)*rows) of every gradient
    packed_ = torch::zeros({n, grad_numel_}, fp32_);
    for (auto& e : entries_) {
      if (!e.trainable) continue;
      auto g = e.param.grad();
      if (g.defined()) {
        auto padded = torch::zeros({n * e.rows, e.rest}, fp32_);
        padded.narrow(0, 0, e.d0).copy_(g.reshape({e.d0, e.rest}));
        packed_.narrow(1, e.grad_offset, e.rows * e.rest).copy_(padded.view({n, e.rows * e.rest}));
      }
      e.param.mutable_grad() = torch::Tensor();  // the full gradient is freed right away
    }
    rs_out_ = torch::empty({grad_numel_}, fp32_);
    rs_work_ = comm_->reduce_scatter_async(packed_.view({-1}), rs_out_, comm::ReduceOp::Avg);
  }
  void finish_grads() override {
    if (!rs_work_) return;
    wait_for(rs_work_);
    rs_work_.reset();
    for (auto& e : entries_)
      if (e.trainable)
        e.shard_grad.add_(rs_out_.narrow(0, e.grad_offset, e.rows * e.rest).view_as(e.shard));
    packed_ = rs_out_ = torch::Tensor();
  }
  std::vector<OptimSlot> optim_slots() override {
    std::vector<OptimSlot> slots;
    for (auto& e : entries_)
      if (e.trainable) slots.push_back({e.name + "[dim0 shard]", e.shard, e.shard_grad});
    return slots;
  }
  void zero_grad() override {
    for (auto& e : entries_)
      if (e.trainable) e.shard_grad.zero_();
  }
  int64_t param_bytes() const override {
    int64_t b = 0;
    for (auto& e : entries_) b += e.shard.nbytes();
    return b;
  }
  int64_t grad_bytes() const override {
    int64_t b = 0;
    for (auto& e : entries_)
      if (e.trainable) b += e.shard_grad.nbytes();
    return b;
  }

 public:
  std::vector<model::hf::HeldTensor> held_tensors() const override {
    std::vector<model::hf::HeldTensor> out;
    for (const auto& e : entries_) {
      const auto valid = comm::shard_range(e.d0, comm_->size(), comm_->rank());
      if (valid.size() == 0) continue;
      model::hf::HeldTensor h;
      h.name = e.name;
      h.full_shape = e.param.sizes().vec();  // sizes survive free_storage
      h.region = model::hf::Region::whole(h.full_shape);
      if (e.param.dim() > 0) h.region = h.region.narrowed(0, valid.begin, valid.size());
      h.local = e.shard.narrow(0, 0, valid.size()).view(h.region.size);  // rows are contiguous
      out.push_back(std::move(h));
    }
    return out;
  }

 private:
  struct Entry {
    std::string name;
    torch::Tensor param, alias, shard, shard_grad;
    bool trainable = false;
    int64_t d0 = 0, rest = 0, rows = 0, gather_offset = 0, grad_offset = 0;
  };
  std::shared_ptr<comm::Communicator> comm_;
  std::vector<Entry> entries_;
  int64_t gather_numel_ = 0, grad_numel_ = 0;
  torch::TensorOptions fp32_;  // float32 on the parameters' device
  torch::Tensor send_, recv_, packed_, rs_out_;
  comm::WorkPtr work_, rs_work_;
  GatherState state_ = GatherState::Gathered;
};

}  // namespace

std::unique_ptr<ShardedUnit> make_flat_unit(NamedParams params,
                                            std::shared_ptr<comm::Communicator> comm,
                                            const Materialise& materialise) {
  return std::make_unique<FlatUnit>(std::move(params), std::move(comm), materialise);
}

std::unique_ptr<ShardedUnit> make_per_param_unit(NamedParams params,
                                                 std::shared_ptr<comm::Communicator> comm,
                                                 const Materialise& materialise) {
  return std::make_unique<PerParamUnit>(std::move(params), std::move(comm), materialise);
}

WorkingSet sharded_working_set(const std::vector<UnitSize>& units, int ranks, bool per_parameter) {
  WorkingSet ws;
  ws.block_outputs_kept = true;  // ShardedBlockFunction (fsdp.cpp) saves its output
  if (units.empty()) return ws;
  const double n = double(ranks);
  const UnitSize& root = units[0];
  const size_t blocks = units.size() - 1;
  auto block = [&](size_t i) -> const UnitSize& { return units[i + 1]; };
  double worst = 0, worst_comm = 0;
  for (size_t i = 0; i < blocks; ++i) {
    double bytes = 0, comm = 0;
    if (per_parameter) {
      bytes = 4.0 * double(block(i).numel);
      if (i > 0) {
        bytes += 4.0 * double(block(i - 1).numel);
        comm += 4.0 * (n + 1) * double(block(i - 1).shard);
      }
      if (i + 1 < blocks) comm += 4.0 * (n + 1) * double(block(i + 1).trainable_shard);
      bytes += comm;
    } else {
      bytes = 8.0 * double(block(i).numel);
      if (i > 0) bytes += 4.0 * double(block(i - 1).numel);
      if (i + 1 < blocks) bytes += 4.0 * double(block(i + 1).numel) + 4.0 * double(block(i + 1).shard);
    }
    if (bytes > worst) {
      worst = bytes;
      worst_comm = comm;
    }
  }
  ws.block_comm = worst_comm;
  if (per_parameter) {
    ws.head = 4.0 * double(root.numel);
    ws.block = 4.0 * double(root.numel + root.trainable_numel) + worst;
  } else {
    ws.head = 8.0 * double(root.numel);
    ws.block = ws.head + worst;
  }
  return ws;
}

}  // namespace hlp::parallel
