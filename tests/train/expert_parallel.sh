#!/usr/bin/env bash
# Expert parallelism (--ep) on real runs of hlp-train. Usage: expert_parallel.sh HLP_TRAIN CASE
#   bytes      ddp+ep2 on 2 ranks (small-moe, fp32): every rank's all-to-all bytes, step by step
#              and summed, equal the closed form of docs/strategies.md for the slots the router
#              sent (the result file's per-rank routing table); the routing table sums to
#              tokens x top-k in every step and layer; the imbalance metric is the table's;
#              the time blocked in the all-to-alls (all_to_all_exposed_s) is > 0 and part of
#              comm_exposed_s in every step.
#   refusals   --ep that does not divide the experts or the data-parallel ranks, and --ep on a
#              model without MoE layers: one error line, exit 2 (every rank: mpiexec's code).
set -u
HLP_TRAIN=$1
CASE=$2
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
PY=/usr/bin/python3
dir=$(mktemp -d /tmp/hlp_ep_${CASE}.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model small-moe --seq-len 64 --micro-batch 1 --global-batch 4 --steps 3 --threads 1
        --loader-threads 1 --precision fp32
        --lora-targets in_proj_qkvz,q_proj,gate_proj,up_proj,down_proj)

case "$CASE" in
bytes)
  "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy ddp --ep 2 "${common[@]}" --out "$dir/ep.h5" \
      > "$dir/ep.log" 2>&1 || { cat "$dir/ep.log"; fail "ddp+ep2 run"; }
  grep -q "experts: 8 sparse layers x 16 experts (top 4, ep 2)" "$dir/ep.log" ||
    { cat "$dir/ep.log"; fail "no experts summary line"; }
  "$PY" - "$dir/ep.h5" <<'PY' || fail "all-to-all bytes or routing table"
import sys
import h5py
import numpy as np
f = h5py.File(sys.argv[1], "r")
g = f["experts"]
E, K, ep = int(g.attrs["experts"]), int(g.attrs["top_k"]), int(g.attrs["ep"])
layers = list(g.attrs["layers"])
tokens = g["tokens_per_expert"][:]      # [steps, L, E], every rank's slots
ranks = g["rank_tokens_per_expert"][:]  # [world, L, E], each rank's own, over the steps
steps, L = tokens.shape[0], len(layers)
world = ranks.shape[0]
assert (E, K, ep, L, steps, world) == (16, 4, 2, 8, 3, 2), (E, K, ep, L, steps, world)
# every step and layer routes every token K times: 4 sequences x 64 tokens x 4
assert (tokens.sum(axis=2) == 4 * 64 * K).all(), tokens.sum(axis=2)
assert (ranks.sum(axis=0) == tokens.sum(axis=0)).all(), "ranks' tables do not add up"
# the imbalance metric: the worst layer's most / mean slots an expert, every step
imb = f["steps/expert_imbalance"][:]
want = (tokens.max(axis=2) / tokens.mean(axis=2)).max(axis=1)
assert np.allclose(imb[0], want) and np.allclose(imb[1], want), (imb, want)
# the closed form (docs/strategies.md): rank r holds experts [r E/ep, (r+1) E/ep); per layer and
# micro-batch it sends its slots for the other rank's experts (dispatch, forward) and the
# outputs of the slots the other rank sent it (combine, forward), both again backward, D x 4
# bytes a row (fp32); and E - E/ep int64 counts (forward only). (The dispatch's backward runs
# where the layer's input needs a gradient: LoRA on layer 0's in_proj_qkvz makes it so for
# every layer here; with that frozen, layer 0 would send no gradient rows back.)
D, s = 256, 4                   # small-moe's hidden size, fp32
micro = 4 // world              # micro-batches per rank and step (global 4, micro-batch 1)
local = E // ep
a2a = g.attrs["all_to_all_bytes"]
for r in range(world):
    mine = np.zeros(E, bool)
    mine[r * local:(r + 1) * local] = True
    out_rows = ranks[r][:, ~mine].sum()
    in_rows = sum(ranks[q][:, mine].sum() for q in range(world) if q != r)
    want = 2 * (out_rows + in_rows) * D * s + steps * micro * L * (E - local) * 8
    per_step = f["steps/all_to_all_bytes"][r]
    assert per_step.sum() == a2a[r] == want, (r, per_step, a2a[r], want)
    print(f"rank {r}: {out_rows} rows out, {in_rows} rows in over {steps} steps; all-to-all "
          f"{a2a[r]} bytes = the closed form")
# the time blocked in those all-to-alls is its own part of the exposed communication: > 0 in
# every step (each is a blocking exchange), never more than comm_exposed_s
x, comm = f["steps/all_to_all_exposed_s"][:], f["steps/comm_exposed_s"][:]
assert x.shape == comm.shape == (world, steps), (x.shape, comm.shape)
assert (x > 0).all() and (x <= comm).all(), (x, comm)
print(f"all-to-all exposed {x.sum(axis=1)} s of comm_exposed {comm.sum(axis=1)} s (per rank)")
PY
  ;;
refusals)
  fail=0
  # NAME WANT LAUNCH...: exit 2 and one 'error:' line containing WANT (not
  # tests/cli/expect_one_line_error.sh: under mpiexec, MPICH's MPI_Abort adds a line of its own)
  expect_error() {
    local name=$1 want=$2; shift 2
    timeout 120 "$@" > "$dir/out" 2> "$dir/err"
    local rc=$?
    local lines; lines=$(grep -c 'error:' "$dir/err")
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$dir/err"; then
      echo "FAIL $name: exit $rc, $lines error lines (want exit 2, one line with '$want'):"
      cat "$dir/err"; fail=1
    else
      echo "ok   $name: $(grep 'error:' "$dir/err")"
    fi
  }
  expect_error ep-experts "--ep 3 does not divide the model's experts (16" \
    "$MPIEXEC" -n 3 "$HLP_TRAIN" --strategy ddp --ep 3 --model small-moe --seq-len 64 \
    --global-batch 3 --micro-batch 1 --steps 1 --threads 1
  expect_error ep-ranks "--ep 4 does not divide the data-parallel ranks (dp = 2)" \
    "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy ddp --ep 4 "${common[@]}"
  expect_error ep-dense "--ep 2 splits the experts of mixture-of-experts layers, and this model has none" \
    "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy ddp --ep 2 --model small --seq-len 64 --steps 1 \
    --threads 1
  expect_error ep-single "--strategy single does not combine with --ep" \
    "$HLP_TRAIN" --strategy single --ep 2 "${common[@]}"
  exit $fail
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "ok: $CASE"
