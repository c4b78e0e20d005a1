#pragma once
// A sharding unit of fsdp / fsdp2: the parameters of one block (or of the root: embedding,
// final norm, head) that are all-gathered together before the unit computes and freed after.
//
// The full (unsharded) parameters keep their tensor objects for the whole run; only the bytes
// of their storages come and go (the trick FSDP plays with storage resize): autograd's saved
// tensors point at the same storage, which is refilled by the all-gather before backward.
// Gathers write through a separate alias of the storage, so autograd's version counters of the
// parameters do not change.
//
//   FlatUnit      (fsdp, FSDP1/ZeRO-3): the parameters of the unit flattened into one buffer of
//                 N elements per storage dtype (FSDP1 refuses to flatten mixed dtypes: frozen
//                 bf16 matrices and float32 adapters become two FlatParameters, as PEFT's FSDP
//                 wrap policy makes them), each sharded by comm's padding rule (ceil(N/n) a
//                 rank). As with FSDP1's FlatParameter, a buffer requires grad as a whole when
//                 any member trains: its frozen members get gradients too, and its gradient
//                 shard is as large as its parameter shard (with --base-dtype fp32, one buffer:
//                 every frozen weight gets a gradient).
//   PerParamUnit  (fsdp2, DTensor-style): every parameter sharded on dim 0 (padded to
//                 ceil(d0/n) rows a rank) in its storage dtype; frozen and trainable alike,
//                 gathered with one all-gather per storage dtype; gradients and optimizer slots
//                 exist only for trainable shards; only those are reduce-scattered.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/shard.h"
#include "model/precision.h"
#include "parallel/strategy.h"

namespace hlp::parallel {

using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

class ShardedUnit {
 public:
  virtual ~ShardedUnit() = default;
  // Issues the all-gather of the full parameters (no-op if issued or already gathered).
  virtual void issue_gather() = 0;
  // Waits for it; the full parameters are valid afterwards.
  virtual void wait_gather() = 0;
  // Frees the full parameters' bytes.
  virtual void release() = 0;
  // Before this unit's backward: full-size gradient buffers where the unit keeps them.
  virtual void prepare_grads() = 0;
  // After this unit's backward: issue the reduce-scatter of its gradients (average over dp)
  // and drop the full gradients once it finished (finish_grads).
  virtual void reduce_grads() = 0;
  virtual void finish_grads() = 0;

  virtual std::vector<OptimSlot> optim_slots() = 0;
  virtual void zero_grad() = 0;
  virtual int64_t param_bytes() const = 0;  // persistent: the shard(s), as stored
  virtual int64_t param_elements() const = 0;  // their elements
  virtual int64_t grad_bytes() const = 0;   // persistent: the gradient shard(s)
  // This rank's shard of every parameter as regions of the unit's (unsharded) parameters;
  // primary = true (shards are disjoint). Flat units (fsdp) throw UserError.
  virtual std::vector<model::hf::HeldTensor> held_tensors() const = 0;
};

// Gives a parameter that has no bytes yet its values (HybridLM's Values::deferred), right before
// the unit takes its part of it: construction then holds the unit's shards plus one whole
// parameter (per-param) or one whole unit (flat), never the whole model. Empty: values present.
using Materialise = std::function<void(const std::string& name, const torch::Tensor& param)>;

// One parameter of a sharding unit as the working-set model sees it.
struct UnitParam {
  int64_t numel = 0;
  int64_t d0 = 1;             // rows (dim 0; a scalar is one row)
  bool trainable = false;
  int64_t element_bytes = 4;  // as stored (model/precision.h: frozen matrices in the base dtype)
};

// Sizes of one sharding unit, in bytes as stored, for the working-set model below.
struct UnitSize {
  double bytes = 0;                  // every parameter of the unit, unsharded
  double trainable_bytes = 0;        // its trainable parameters, unsharded
  double shard_bytes = 0;            // a rank's padded shards: flat ceil(N_g / n) per dtype
                                     // group g; per parameter ceil(d0 / n) x (numel / d0) each
  double trainable_shard_bytes = 0;  // per parameter: the same over the trainable parameters
  double grad_bytes = 0;             // flat: the groups that require grad, unsharded (their
                                     // whole buffer gets a gradient, frozen members included)
  double grad_shard_bytes = 0;       // flat: those groups' padded shards
};

// The sizes of a unit of `params` (in the unit's order) sharded over `ranks`. Flat: one flat
// buffer per storage dtype (in order of first appearance), as FSDP1 cannot flatten mixed
// dtypes; a buffer requires grad as a whole when any member trains.
UnitSize unit_size(const std::vector<UnitParam>& params, int ranks, bool per_parameter);

// Elements of a rank's fsdp2 shard of a parameter with `d0` rows and `numel` elements over `ranks`
// ranks: ceil(d0 / ranks) rows, zero padded (PerParamUnit's layout; a scalar is one row).
inline int64_t per_parameter_shard(int64_t d0, int64_t numel, int ranks) {
  return d0 == 0 ? 0 : comm::shard_numel(d0, ranks) * (numel / d0);
}

// The working set of fsdp (per_parameter false) or fsdp2 over `ranks` ranks, from the units'
// sizes (units[0] the root, then the blocks in order), in bytes as stored. It follows what
// fsdp.cpp and the units do, micro-batch by micro-batch (B: a unit's bytes, T: its trainable
// ones, G / S_g: flat's gradient buffers and their shards, S / S_t: fsdp2's padded shards;
// block i's backward is the phase):
//   flat  head:  the root gathered with its gradient buffers                    B_root + G_root
//         block: that + block i gathered with its gradient buffers + block i-1 prefetched
//                + block i+1's gradient buffers and reduce-scatter outputs (finished after
//                block i's backward): head + max_i (B_i + G_i + B_i-1 + G_i+1 + S_g,i+1)
//   fsdp2 head:  the root gathered                                             B_root
//         block: that + the root's trainable gradients + block i gathered + block i-1
//                prefetched with its gather buffers (send S, receive n S) + block i+1's
//                reduce-scatter buffers (packed n S_t, output S_t):
//                B_root + T_root + max_i (B_i + B_i-1 + (n+1) S_i-1 + (n+1) S_t,i+1)
// With every parameter in float32 (--base-dtype fp32), flat's B = G = 4 N: 8 N_i as before.
// The gradients autograd itself allocates for block i (fsdp2) or adds into the buffer (fsdp)
// are part of the probed layer's backward (activation_model.h), not counted here.
WorkingSet sharded_working_set(const std::vector<UnitSize>& units, int ranks, bool per_parameter);

// The units: `params` get their values from `materialise` (which also stores each in its dtype,
// materialise_on_device) one at a time; then every parameter keeps the dtype it has.
// `base`: the base dtype materialise stores frozen matrices in (resolved), which decides the
// flat buffer a parameter joins before it has its values.
std::unique_ptr<ShardedUnit> make_flat_unit(NamedParams params,
                                            std::shared_ptr<comm::Communicator> comm,
                                            const Materialise& materialise = {},
                                            model::BaseDtype base = model::BaseDtype::fp32);
std::unique_ptr<ShardedUnit> make_per_param_unit(NamedParams params,
                                                 std::shared_ptr<comm::Communicator> comm,
                                                 const Materialise& materialise = {});

// Two units that gather, release and reduce together, each over its own communicator (--ep:
// a block's routed experts sharded over their replicas, beside the rest of the block over dp).
std::unique_ptr<ShardedUnit> combine_units(std::unique_ptr<ShardedUnit> first,
                                           std::unique_ptr<ShardedUnit> second);

// Storage helpers (also used by tests): bytes of the storage behind a tensor come and go.
void free_storage(const torch::Tensor& t);
void alloc_storage(const torch::Tensor& t, int64_t nbytes);
// A tensor over the same storage as `t` (same offset/sizes/strides) with its own version
// counter: writes through it do not count as in-place modifications of `t`.
torch::Tensor storage_alias(const torch::Tensor& t);

}  // namespace hlp::parallel
