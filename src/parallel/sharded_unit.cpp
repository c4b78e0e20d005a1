#include "parallel/sharded_unit.h"

#include "model/autocast_state.h"
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

// ---------------------------------------------------------------- FSDP1: flat buffers
// One FlatParameter per storage dtype of the unit (a single one when every parameter is
// float32): its members' values live in views of one buffer of N elements, sharded ceil(N/n).
class FlatUnit : public ShardedUnit {
 public:
  FlatUnit(NamedParams params, std::shared_ptr<comm::Communicator> comm,
           const Materialise& materialise, model::BaseDtype base)
      : params_(std::move(params)), comm_(std::move(comm)) {
    torch::NoGradGuard no_grad;
    const int n = comm_->size();
    // Which buffer each parameter joins: its storage dtype (known before it has values).
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i].second;
      const at::ScalarType dtype = model::stored_in_base_dtype(p.requires_grad(), p.dim())
                                       ? model::scalar_type(base)
                                       : p.scalar_type();
      size_t g = 0;
      while (g < groups_.size() && groups_[g].dtype != dtype) ++g;
      if (g == groups_.size()) groups_.push_back(Group{dtype});
      Group& group = groups_[g];
      members_.push_back({g, group.numel, p.requires_grad()});
      group.numel += p.numel();
      group.requires_grad = group.requires_grad || p.requires_grad();
    }
    // The unit lives where its parameters get their values (materialise may move them to the
    // GPU); an empty unit where its communicator's small tensors live.
    device_ = comm_->scalar_device();
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i].second;
      Group& group = groups_[members_[i].group];
      if (materialise) materialise(params_[i].first, p);
      device_ = p.device();
      if (!group.full.defined()) group.full = torch::empty({group.numel}, options(group));
      // p's own bytes are dropped by set_data below: one whole parameter beyond the buffers
      const int64_t offset = members_[i].offset;
      group.full.narrow(0, offset, p.numel()).copy_(p.detach().reshape(-1));
      p.set_data(group.full.narrow(0, offset, p.numel()).view(p.sizes()));
      // FSDP1's FlatParameter requires grad as a whole: frozen members get gradients too.
      if (group.requires_grad) p.requires_grad_(true);
    }
    for (auto& group : groups_) {
      group.range = comm::shard_range(group.numel, n, comm_->rank());
      if (!group.full.defined()) group.full = torch::empty({group.numel}, options(group));
      group.shard = torch::zeros({comm::shard_numel(group.numel, n)}, options(group));
      group.shard.narrow(0, 0, group.range.size())
          .copy_(group.full.narrow(0, group.range.begin, group.range.size()));
      if (group.requires_grad) group.shard_grad = torch::zeros_like(group.shard);
      group.gather_alias = storage_alias(group.full);
    }
    release();
  }

  void issue_gather() override {
    if (state_ != GatherState::Released) return;
    for (auto& group : groups_) {
      alloc_storage(group.full, group.numel * int64_t(group.full.element_size()));
      group.work = comm_->all_gather_async(group.shard, group.gather_alias);
    }
    state_ = GatherState::Gathering;
  }
  void wait_gather() override {
    issue_gather();
    for (auto& group : groups_) {
      if (state_ == GatherState::Gathering) wait_for(group.work);
      group.work.reset();
    }
    state_ = GatherState::Gathered;
  }
  void release() override {
    for (auto& group : groups_) free_storage(group.full);
    state_ = GatherState::Released;
  }
  void prepare_grads() override {
    for (auto& group : groups_)  // [N]: the whole buffer gets a gradient
      if (group.requires_grad) group.full_grad = torch::zeros({group.numel}, options(group));
    for (size_t i = 0; i < params_.size(); ++i) {
      const Group& group = groups_[members_[i].group];
      if (!group.requires_grad) continue;
      auto& p = params_[i].second;
      p.mutable_grad() = group.full_grad.narrow(0, members_[i].offset, p.numel()).view(p.sizes());
    }
  }
  void reduce_grads() override {
    for (auto& group : groups_) {
      if (!group.requires_grad) continue;
      group.rs_out = torch::empty_like(group.shard);
      group.rs_work = comm_->reduce_scatter_async(group.full_grad, group.rs_out,
                                                  comm::ReduceOp::Avg);
    }
  }
  void finish_grads() override {
    bool any = false;
    for (auto& group : groups_) {
      if (!group.rs_work) continue;
      any = true;
      wait_for(group.rs_work);
      group.rs_work.reset();
      group.shard_grad.add_(group.rs_out);
      group.full_grad = group.rs_out = torch::Tensor();
    }
    if (any)
      for (auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
  }
  std::vector<OptimSlot> optim_slots() override {
    // Only the originally trainable elements inside this rank's range are optimised.
    std::vector<OptimSlot> slots;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!members_[i].trainable) continue;
      const Group& group = groups_[members_[i].group];
      const int64_t begin = members_[i].offset;
      const int64_t lo = std::max(begin, group.range.begin);
      const int64_t hi = std::min(begin + params_[i].second.numel(), group.range.end);
      if (hi <= lo) continue;
      slots.push_back({params_[i].first + "[flat " + std::to_string(lo - begin) + ":" +
                           std::to_string(hi - begin) + "]",
                       group.shard.narrow(0, lo - group.range.begin, hi - lo),
                       group.shard_grad.narrow(0, lo - group.range.begin, hi - lo)});
    }
    return slots;
  }
  void zero_grad() override {
    for (auto& group : groups_)
      if (group.requires_grad) group.shard_grad.zero_();
  }
  int64_t param_bytes() const override {
    int64_t bytes = 0;
    for (const auto& group : groups_) bytes += group.shard.nbytes();
    return bytes;
  }
  int64_t param_elements() const override {
    int64_t elements = 0;
    for (const auto& group : groups_) elements += group.shard.numel();
    return elements;
  }
  int64_t grad_bytes() const override {
    int64_t bytes = 0;
    for (const auto& group : groups_)
      if (group.requires_grad) bytes += group.shard_grad.nbytes();
    return bytes;
  }
  std::vector<model::hf::HeldTensor> held_tensors() const override {
    throw user_error("--strategy fsdp (flat parameters) cannot load or save weights by name "
                     "(--init-from, --load-adapter, --save-adapter); use fsdp2");
  }

 private:
  struct Group {  // one FlatParameter
    explicit Group(at::ScalarType dtype) : dtype(dtype) {}
    at::ScalarType dtype;
    int64_t numel = 0;
    bool requires_grad = false;  // some member trains: the whole buffer gets gradients
    comm::ShardRange range;
    torch::Tensor full, gather_alias, shard, shard_grad, full_grad, rs_out;
    comm::WorkPtr work, rs_work;
  };
  struct Member {
    size_t group;
    int64_t offset;  // in its group's buffer
    bool trainable;  // originally (the optimizer's), before the buffer's requires_grad
  };
  torch::TensorOptions options(const Group& group) const {
    return torch::TensorOptions().dtype(group.dtype).device(device_);
  }

  NamedParams params_;
  std::shared_ptr<comm::Communicator> comm_;
  std::vector<Group> groups_;
  std::vector<Member> members_;
  torch::Device device_{torch::kCPU};
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
    device_ = comm_->scalar_device();
    for (auto& [name, p] : params) {
      if (materialise) materialise(name, p);  // values, storage dtype, device
      device_ = p.device();
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
      // [ceil(d0/n), rest], zero padded, in the parameter's storage dtype
      e.shard = torch::zeros({e.rows, e.rest}, p.options().requires_grad(false));
      const auto valid = comm::shard_range(e.d0, n, r);
      if (valid.size() > 0)
        e.shard.narrow(0, 0, valid.size())
            .copy_(p.detach().reshape({e.d0, e.rest}).narrow(0, valid.begin, valid.size()));
      free_storage(e.param);  // the whole parameter goes now, before the next one is built
      // one all-gather per storage dtype: frozen 16-bit matrices and float32 apart
      size_t g = 0;
      while (g < gathers_.size() && gathers_[g].dtype != p.scalar_type()) ++g;
      if (g == gathers_.size()) gathers_.push_back(Gather{p.scalar_type()});
      e.gather = g;
      e.gather_offset = gathers_[g].numel;
      gathers_[g].numel += e.rows * e.rest;
      if (e.trainable) {
        e.shard_grad = torch::zeros_like(e.shard);
        e.grad_offset = grad_numel_;
        grad_numel_ += e.rows * e.rest;
      }
      entries_.push_back(std::move(e));
    }
    if (gathers_.empty()) gathers_.push_back(Gather{torch::kFloat});  // an empty unit
    release();
  }

  void issue_gather() override {
    if (state_ != GatherState::Released) return;
    for (auto& e : entries_) alloc_storage(e.param, e.param.numel() * int64_t(e.param.element_size()));
    for (size_t g = 0; g < gathers_.size(); ++g) {
      Gather& gather = gathers_[g];
      // copy-in: this rank's shards of the dtype back to back, [S_g]
      std::vector<torch::Tensor> parts;
      for (auto& e : entries_)
        if (e.gather == g) parts.push_back(e.shard.reshape(-1));
      const auto options = torch::TensorOptions().dtype(gather.dtype).device(device_);
      gather.send = parts.empty() ? torch::zeros({0}, options) : torch::cat(parts);
      gather.recv = torch::empty({comm_->size() * gather.numel}, options);  // [n * S_g]
      gather.work = comm_->all_gather_async(gather.send, gather.recv);
    }
    state_ = GatherState::Gathering;
  }
  void wait_gather() override {
    issue_gather();
    if (state_ == GatherState::Gathering) {
      for (auto& gather : gathers_) {
        wait_for(gather.work);
        gather.work.reset();
      }
      // copy-out: rank q's block of each parameter -> rows [q*rows, q*rows + valid)
      torch::NoGradGuard no_grad;
      for (auto& e : entries_) {
        const Gather& gather = gathers_[e.gather];
        auto by_rank = gather.recv.view({comm_->size(), gather.numel});
        auto full = e.alias.view({e.d0, e.rest});
        for (int q = 0; q < comm_->size(); ++q) {
          const int64_t valid = std::min(e.rows, std::max<int64_t>(0, e.d0 - q * e.rows));
          if (valid == 0) continue;
          full.narrow(0, q * e.rows, valid)
              .copy_(by_rank[q].narrow(0, e.gather_offset, valid * e.rest).view({valid, e.rest}));
        }
      }
      for (auto& gather : gathers_) gather.send = gather.recv = torch::Tensor();
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
    const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(device_);
    packed_ = torch::zeros({n, grad_numel_}, fp32);  // trainable parameters are float32
    for (auto& e : entries_) {
      if (!e.trainable) continue;
      auto g = e.param.grad();
      if (g.defined()) {
        auto padded = torch::zeros({n * e.rows, e.rest}, fp32);
        padded.narrow(0, 0, e.d0).copy_(g.reshape({e.d0, e.rest}));
        packed_.narrow(1, e.grad_offset, e.rows * e.rest).copy_(padded.view({n, e.rows * e.rest}));
      }
      e.param.mutable_grad() = torch::Tensor();  // the full gradient is freed right away
    }
    rs_out_ = torch::empty({grad_numel_}, fp32);
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
  int64_t param_elements() const override {
    int64_t n = 0;
    for (auto& e : entries_) n += e.shard.numel();
    return n;
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
    size_t gather = 0;  // its all-gather (storage dtype)
    int64_t d0 = 0, rest = 0, rows = 0, gather_offset = 0, grad_offset = 0;
  };
  struct Gather {  // the shards of one storage dtype, gathered together
    explicit Gather(at::ScalarType dtype) : dtype(dtype) {}
    at::ScalarType dtype;
    int64_t numel = 0;  // S_g: elements of this rank's shards
    torch::Tensor send, recv;
    comm::WorkPtr work;
  };
  std::shared_ptr<comm::Communicator> comm_;
  std::vector<Entry> entries_;
  std::vector<Gather> gathers_;
  int64_t grad_numel_ = 0;
  torch::Device device_{torch::kCPU};  // the parameters'
  torch::Tensor packed_, rs_out_;
  comm::WorkPtr rs_work_;
  GatherState state_ = GatherState::Gathered;
};

}  // namespace

std::unique_ptr<ShardedUnit> make_flat_unit(NamedParams params,
                                            std::shared_ptr<comm::Communicator> comm,
                                            const Materialise& materialise,
                                            model::BaseDtype base) {
  return std::make_unique<FlatUnit>(std::move(params), std::move(comm), materialise, base);
}

std::unique_ptr<ShardedUnit> make_per_param_unit(NamedParams params,
                                                 std::shared_ptr<comm::Communicator> comm,
                                                 const Materialise& materialise) {
  return std::make_unique<PerParamUnit>(std::move(params), std::move(comm), materialise);
}

UnitSize unit_size(const std::vector<UnitParam>& params, int ranks, bool per_parameter) {
  UnitSize u;
  struct FlatGroup {
    int64_t element_bytes = 0, numel = 0;
    bool requires_grad = false;
  };
  std::vector<FlatGroup> groups;  // flat: one buffer per storage dtype, in order of appearance
  for (const UnitParam& p : params) {
    const double bytes = double(p.numel) * double(p.element_bytes);
    u.bytes += bytes;
    if (p.trainable) u.trainable_bytes += bytes;
    if (per_parameter) {
      const double shard = double(per_parameter_shard(p.d0, p.numel, ranks)) * p.element_bytes;
      u.shard_bytes += shard;
      if (p.trainable) u.trainable_shard_bytes += shard;
      continue;
    }
    size_t g = 0;
    while (g < groups.size() && groups[g].element_bytes != p.element_bytes) ++g;
    if (g == groups.size()) groups.push_back({p.element_bytes});
    groups[g].numel += p.numel;
    groups[g].requires_grad = groups[g].requires_grad || p.trainable;
  }
  for (const FlatGroup& g : groups) {
    const double shard = double(comm::shard_numel(g.numel, ranks)) * double(g.element_bytes);
    u.shard_bytes += shard;
    if (!g.requires_grad) continue;
    u.grad_bytes += double(g.numel) * double(g.element_bytes);
    u.grad_shard_bytes += shard;
  }
  return u;
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
      bytes = block(i).bytes;
      if (i > 0) {
        bytes += block(i - 1).bytes;
        comm += (n + 1) * block(i - 1).shard_bytes;
      }
      if (i + 1 < blocks) comm += (n + 1) * block(i + 1).trainable_shard_bytes;
      bytes += comm;
    } else {
      bytes = block(i).bytes + block(i).grad_bytes;
      if (i > 0) bytes += block(i - 1).bytes;
      if (i + 1 < blocks) bytes += block(i + 1).grad_bytes + block(i + 1).grad_shard_bytes;
    }
    if (bytes > worst) {
      worst = bytes;
      worst_comm = comm;
    }
    ws.blocks.push_back(bytes);
    ws.blocks_comm.push_back(comm);
  }
  ws.block_comm = worst_comm;
  // what the root adds in every block's phase
  const double root_in_blocks =
      per_parameter ? root.bytes + root.trainable_bytes : root.bytes + root.grad_bytes;
  ws.head = per_parameter ? root.bytes : root.bytes + root.grad_bytes;
  ws.block = root_in_blocks + worst;
  for (double& b : ws.blocks) b += root_in_blocks;
  return ws;
}

namespace {

class CombinedUnit : public ShardedUnit {
 public:
  CombinedUnit(std::unique_ptr<ShardedUnit> a, std::unique_ptr<ShardedUnit> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  void issue_gather() override { a_->issue_gather(); b_->issue_gather(); }
  void wait_gather() override { a_->wait_gather(); b_->wait_gather(); }
  void release() override { a_->release(); b_->release(); }
  void prepare_grads() override { a_->prepare_grads(); b_->prepare_grads(); }
  void reduce_grads() override { a_->reduce_grads(); b_->reduce_grads(); }
  void finish_grads() override { a_->finish_grads(); b_->finish_grads(); }
  std::vector<OptimSlot> optim_slots() override {
    auto out = a_->optim_slots();
    for (auto& s : b_->optim_slots()) out.push_back(s);
    return out;
  }
  void zero_grad() override { a_->zero_grad(); b_->zero_grad(); }
  int64_t param_bytes() const override { return a_->param_bytes() + b_->param_bytes(); }
  int64_t param_elements() const override { return a_->param_elements() + b_->param_elements(); }
  int64_t grad_bytes() const override { return a_->grad_bytes() + b_->grad_bytes(); }
  std::vector<model::hf::HeldTensor> held_tensors() const override {
    auto out = a_->held_tensors();
    for (auto& h : b_->held_tensors()) out.push_back(std::move(h));
    return out;
  }

 private:
  std::unique_ptr<ShardedUnit> a_, b_;
};

}  // namespace

std::unique_ptr<ShardedUnit> combine_units(std::unique_ptr<ShardedUnit> first,
                                           std::unique_ptr<ShardedUnit> second) {
  return std::make_unique<CombinedUnit>(std::move(first), std::move(second));
}

}  // namespace hlp::parallel
