#!/bin/bash
# hlp-plan's context-parallel candidates (issue 37): one row per pair of exchange schemes the
# model's heads allow, each priced on its own (cp_exchange_s, part of comm_s), and the G layers'
# all-to-all without the transition pass (less compute). tiny: 2 G heads, 4 / 2 attention heads.
# usage: plan_cp_schemes.sh HLP_PLAN
set -euo pipefail
plan=$1
work=$(mktemp -d /tmp/hlp-plan-cp.XXXXXX); trap 'rm -rf "$work"' EXIT
for ranks in 2 4; do
  "$plan" --model tiny --seq-len 256 --global-batch 1 --micro-batch 1 --lora-rank 8 \
      --threads 1 --gpu h100-80 --ranks "$ranks" --strategies cp --format csv \
      > "$work/cp$ranks.csv" || { echo "plan_cp_schemes: FAIL: hlp-plan --ranks $ranks" >&2; exit 1; }
done
/usr/bin/python3 - "$work" <<'PY'
import csv, os, sys
work = sys.argv[1]
bad = []
def rows(ranks):
    return {r["name"]: r for r in csv.DictReader(open(os.path.join(work, f"cp{ranks}.csv")))}
two, four = rows(2), rows(4)
pairs = [(g, a) for g in ("chain", "allgather", "alltoall") for a in ("ring", "alltoall")]
want2 = {f"cp n=2 G {g} attn {a}" for g, a in pairs}
if set(two) != want2:
    bad.append(f"cp 2 candidates {sorted(two)}, want {sorted(want2)}")
# cp 4: tiny's 2 G heads do not divide (no G alltoall); its 4 query heads do (KV repeated twice)
want4 = {f"cp n=4 G {g} attn {a}" for g, a in pairs if g != "alltoall"}
if set(four) != want4:
    bad.append(f"cp 4 candidates {sorted(four)}, want {sorted(want4)}")
for name, r in {**two, **four}.items():
    g, a = name.split(" G ")[1].split(" attn ")
    if (r["cp_scheme"], r["cp_attention"]) != (g, a):
        bad.append(f"{name}: columns {r['cp_scheme']} / {r['cp_attention']}")
    x, comm = float(r["cp_exchange_s"]), float(r["comm_s"])
    if not (0 < x <= comm):
        bad.append(f"{name}: cp_exchange_s {x} not in (0, comm_s {comm}]")
def val(table, name, col):
    return float(table[name][col])
if len(bad) == 0:
    # each scheme its own price; the all-to-all G layers skip the transition pass
    prices = {val(two, f"cp n=2 G {g} attn ring", "cp_exchange_s") for g in ("chain", "allgather", "alltoall")}
    if len(prices) != 3:
        bad.append(f"the G schemes share a price: {prices}")
    if val(two, "cp n=2 G alltoall attn ring", "cp_exchange_s") == val(two, "cp n=2 G alltoall attn alltoall", "cp_exchange_s"):
        bad.append("the attention schemes share a price")
    if not val(two, "cp n=2 G alltoall attn ring", "compute_s") < val(two, "cp n=2 G chain attn ring", "compute_s"):
        bad.append("G alltoall does not drop the transition pass's compute")
if bad:
    sys.exit("plan_cp_schemes: FAIL:\n  " + "\n  ".join(bad))
print(f"plan_cp_schemes: {len(two)} candidates at cp 2, {len(four)} at cp 4, each priced")
PY
