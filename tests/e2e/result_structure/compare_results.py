#!/usr/bin/python3
"""compare_results.py REF.h5 NEW.h5 [--allow-added PATH ...] [--all-exact] [--quiet]
   compare_results.py --table      (prints CLASSIFICATION)

Compares an HLP result file (docs/results-schema.md) written by a NEW build against a REFERENCE
file of the same configuration written by the baseline build, and fails when the two differ in
anything but timing and environment.

Paths (used in the output, in CLASSIFICATION and by --allow-added):
  /                     the root group          /steps/loss        a dataset
  /steps                a group                 /trace/rank0       a (compound) dataset
  /@config              attribute `config` of the root group
  /model@params_total   attribute `params_total` of the group /model (OBJECT@ATTRIBUTE)
  /trace/rank0[name]    member `name` of a compound dataset (output only)
  /@config[eval-every]  the line `eval-every = ...` of the resolved INI in /@config (--allow-added:
                        a new hlp-train option whose line only NEW has)

What is compared:
  structure  every group, dataset and attribute that exists in either file must exist in both;
             datasets: HDF5 type (numpy dtype and, for strings, fixed/variable length + charset;
             compound members with their offsets), shape and maximum shape; attributes: type and
             shape. Storage (chunking, compression, file format version) is not compared.
             A path only in NEW is allowed when it (or an object above it) matches an
             --allow-added pattern (fnmatch syntax: `/steps/new_metric`, `/summary@new_metric_*`,
             `/@mesh_axes`, `/newgroup` = the group and everything in it).
  values     every value, by the first matching row of CLASSIFICATION below:
               exact   bitwise equal (floats: same bits, NaN = NaN), strings equal
               float   |new - ref| <= atol + rtol * |ref| elementwise, NaN where the other is NaN
               skip    timing / environment: not compared (a dataset's NaN cells must still be at
                       the same places: NaN means "not reported", which is not a timing)
               config  the resolved INI text, line by line, after normalising machine-resolved
                       keys (CONFIG_NORMALISE)
               text    a string after a regex normalisation (TEXT_NORMALISE)
               trace   /trace/rank<N>: row count, then the non-time members (TRACE_KEY_MEMBERS)
                       of every event, per lane: lanes in TRACE_ORDERED_LANES in recording order,
                       the others as a multiset (see TRACE_ORDERED_LANES); start_s/end_s skipped
               summary /summary@<metric>_median_per_rank and ..._median_max_over_ranks: the
                       class of /steps/<metric>
Output: one line per difference, `PATH: what differs (ref X, new Y)`, then a summary line.
Exit: 0 no difference; 1 differences; 2 bad usage or a file that cannot be read.
--all-exact compares every value (timings included) exactly: to check that a copy of a file
(h5repack) holds the same data, not to compare two runs.
"""
import argparse
import fnmatch
import re
import signal
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"compare_results.py: needs h5py and numpy ({e})", file=sys.stderr)
    sys.exit(2)

# ---------------------------------------------------------------------------------------------
# CLASSIFICATION: (path pattern (fnmatch), class, rtol, atol, why). First match wins.
# Derived empirically (README.md "Classification and the evidence for it"): the baseline sweep
# was run 5 times (runs A-E, E with two busy loops competing for the 2 cores) and B-E compared
# with A (48 file pairs); every value that differed in some pair is `skip` below and says so
# ("differed ..." = largest relative difference seen); every value marked exact/float was bitwise
# identical in all 48 pairs. Other `skip` rows are versions and machine properties by nature.
# ---------------------------------------------------------------------------------------------
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-8
CLASSIFICATION = [
    # --- root attributes: identity of the run ---------------------------------------------------
    ("/@hlp_schema_version", "exact", 0, 0, "schema layout version"),
    ("/@complete", "exact", 0, 0, "1 after a clean end"),
    ("/@world_size", "exact", 0, 0, "ranks"),
    ("/@mesh", "exact", 0, 0, "dp, pp, tp"),
    ("/@strategy", "exact", 0, 0, "canonical strategy name"),
    ("/@backend", "exact", 0, 0, "mpi on CPU (comm = auto)"),
    ("/@device", "exact", 0, 0, "cpu (make_fixtures.sh hides GPUs: CUDA_VISIBLE_DEVICES=)"),
    ("/@device_kind", "exact", 0, 0, "cpu"),
    ("/@device_name", "exact", 0, 0, "cpu"),
    ("/@device_count", "exact", 0, 0, "0 on CPU runs"),
    ("/@devices_per_node", "exact", 0, 0, "0 on CPU runs"),
    ("/@device_compute_capability", "exact", 0, 0, "'' on CPU runs"),
    ("/@device_memory_bytes", "exact", 0, 0, "0 on CPU runs"),
    ("/@cuda_driver_version", "exact", 0, 0, "'' on CPU runs"),
    ("/@cuda_runtime_version", "exact", 0, 0, "'' on CPU runs"),
    ("/@config", "config", 0, 0, "resolved INI; paths normalised (CONFIG_NORMALISE)"),
    ("/@stopped_reason", "exact", 0, 0, "'' (the run ended normally)"),
    ("/@trace_dropped", "exact", 0, 0, "'' (no disk-full)"),
    ("/@flush_every_steps", "exact", 0, 0, "from the config"),
    ("/@threads_per_rank", "exact", 0, 0, "threads = 1 in jobs/local.ini (not auto)"),
    ("/@threads_intra_op", "exact", 0, 0, "LibTorch pool bounded to threads = 1 on any machine"),
    ("/@threads_inter_op", "exact", 0, 0, "LibTorch pool bounded to threads = 1 on any machine"),
    ("/@node_ranks", "exact", 0, 0, "local mpiexec: every rank on one node"),
    ("/@node_threads_requested", "exact", 0, 0, "ranks x threads"),
    ("/@peak_flops_source", "text", 0, 0, "method in words; its repetition count is timing"),
    ("/@hosts", "text", 0, 0, "host names are environment; their number (= world) is not"),
    # --- root attributes: environment (values depend on the machine / the libraries) -----------
    ("/@hlp_version", "skip", 0, 0, "version"),
    ("/@git_commit", "skip", 0, 0, "version (commit of the build)"),
    ("/@libtorch_version", "skip", 0, 0, "version"),
    ("/@mpi_version", "skip", 0, 0, "version"),
    ("/@hdf5_version", "skip", 0, 0, "version"),
    ("/@blas_library", "skip", 0, 0, "the BLAS LibTorch loaded on this machine (CPU kernel name)"),
    ("/@blas_threads", "skip", 0, 0, "-1 where the BLAS pool cannot be read"),
    ("/@threads_openmp", "skip", 0, 0, "-1 where LibTorch loaded no OpenMP runtime"),
    ("/@node_cores", "skip", 0, 0, "cores of this machine"),
    ("/@oversubscribed", "skip", 0, 0, "threads requested vs this machine's cores"),
    ("/@slurm_*", "skip", 0, 0, "set when ctest itself runs under Slurm"),
    # --- root attributes: timing (differed between runs A-E) ------------------------------------
    ("/@start_time", "skip", 0, 0, "date (differed in every run)"),
    ("/@end_time", "skip", 0, 0, "date (differed in every run)"),
    ("/@start_unix_s", "skip", 0, 0, "date (differed in every run)"),
    ("/@peak_flops_per_device", "skip", 0, 0, "measured at start (differed up to 43%)"),
    ("/@clock_offset_s", "skip", 0, 0, "measured clock offsets (differed in 39/48 pairs)"),
    ("/@clock_rtt_s", "skip", 0, 0, "measured ping-pong (differed in 36/48 pairs)"),
    # issue 39's requeue bookkeeping (in the fixtures regenerated since): the launch's clock
    ("/@trace_epoch_unix_s", "skip", 0, 0, "date of the first launch's aligned start"),
    # a hash of the resolved configuration, whose data paths are this checkout's absolute paths
    # (/@config itself is compared with the paths normalised): it differs between checkouts
    ("/@config_fingerprint", "skip", 0, 0, "hash of the configuration with this checkout's paths"),
    ("/segments@start_unix_s", "skip", 0, 0, "date of each launch"),
    ("/segments@trace_shift_s", "skip", 0, 0, "each launch's clock against the first's"),
    ("/segments@launches", "skip", 0, 0, "text of each launch: its start date and hosts"),
    # --- /model --------------------------------------------------------------------------------
    ("/model@plan_step_s", "skip", 0, 0, "hlp-plan prediction scaled by the measured peak FLOP/s "
     "(differed up to 43%, as peak_flops_per_device)"),
    ("/model@plan_tokens_per_s", "skip", 0, 0, "likewise"),
    ("/model@*", "exact", 0, 0, "model sizes, FLOP counts, probe bytes, names (identical A-E)"),
    # --- /pipeline (pp configurations) ---------------------------------------------------------
    ("/pipeline@stage_cost_measured_s", "skip", 0, 0, "measured seconds (differed up to 39%)"),
    ("/pipeline@stage_cpu_measured_s", "skip", 0, 0, "measured CPU seconds (differed up to 37%)"),
    ("/pipeline@bubble_fraction", "skip", 0, 0, "measured idle fraction (differed up to 74%)"),
    ("/pipeline@bubble_fraction_simulated", "skip", 0, 0, "simulated at measured F/B/W "
     "(differed up to 24%)"),
    ("/pipeline@bubble_fraction_theory", "exact", 0, 0, "closed form (p-1)/(m+p-1) for 1f1b "
     "(zb-h1 would use measured times; not in this sweep)"),
    ("/pipeline@*", "exact", 0, 0, "split, schedule, stage layout, predicted cost"),
    # --- /context_parallel (not in this sweep; measured seconds are timing) --------------------
    ("/context_parallel@attention_s", "skip", 0, 0, "measured seconds"),
    ("/context_parallel@state_chain_s", "skip", 0, 0, "measured seconds"),
    ("/context_parallel@*", "exact", 0, 0, "sizes and byte counts"),
    # --- /steps --------------------------------------------------------------------------------
    ("/steps/step", "exact", 0, 0, "step numbers"),
    ("/steps/loss", "float", LOSS_RTOL, LOSS_ATOL, "floating-point summation order: may differ "
     "between CPU models (AVX2 / AVX-512); identical A-E"),
    ("/steps/grad_norm", "float", LOSS_RTOL, LOSS_ATOL, "likewise"),
    ("/steps/eval_loss", "float", LOSS_RTOL, LOSS_ATOL, "likewise (NaN: eval-every = 0)"),
    ("/steps/tokens", "exact", 0, 0, "counts"),
    ("/steps/lr", "exact", 0, 0, "schedule"),
    ("/steps/comm_bytes", "exact", 0, 0, "payload bytes"),
    ("/steps/param_bytes", "exact", 0, 0, "reported by the strategy"),
    ("/steps/grad_bytes", "exact", 0, 0, "reported by the strategy"),
    ("/steps/optimizer_bytes", "exact", 0, 0, "reported by the strategy"),
    ("/steps/peak_bytes", "exact", 0, 0, "measured allocator peak, but identical in A-E "
     "(incl. E under CPU contention): shape-determined"),
    ("/steps/current_bytes", "exact", 0, 0, "measured, identical in A-E"),
    ("/steps/activation_bytes", "exact", 0, 0, "peak - held bytes, identical in A-E"),
    ("/steps/activation_predicted_bytes", "exact", 0, 0, "activation probe, identical in A-E"),
    ("/steps/precision_bf16", "exact", 0, 0, "0/1"),
    ("/steps/loss_scale", "exact", 0, 0, "1 in fp32"),
    ("/steps/step_skipped", "exact", 0, 0, "0 in fp32"),
    ("/steps/step_time_s", "skip", 0, 0, "timing (differed in every run)"),
    ("/steps/tokens_per_s", "skip", 0, 0, "timing"),
    ("/steps/tokens_per_s_per_device", "skip", 0, 0, "timing"),
    ("/steps/data_wait_s", "skip", 0, 0, "timing"),
    ("/steps/forward_s", "skip", 0, 0, "timing"),
    ("/steps/backward_s", "skip", 0, 0, "timing"),
    ("/steps/optimizer_s", "skip", 0, 0, "timing"),
    ("/steps/comm_exposed_s", "skip", 0, 0, "timing"),
    ("/steps/pipeline_wait_s", "skip", 0, 0, "timing"),
    ("/steps/other_s", "skip", 0, 0, "timing"),
    ("/steps/step_end_s", "skip", 0, 0, "timing"),
    ("/steps/cpu_s", "skip", 0, 0, "CPU time"),
    ("/steps/cpu_util", "skip", 0, 0, "CPU utilisation"),
    ("/steps/compute_cpu_s", "skip", 0, 0, "CPU time"),
    ("/steps/loader_cpu_s", "skip", 0, 0, "CPU time"),
    ("/steps/comm_cpu_s", "skip", 0, 0, "CPU time"),
    ("/steps/mfu", "skip", 0, 0, "tokens/s over measured peak"),
    ("/steps/mfu_model", "skip", 0, 0, "tokens/s over measured peak"),
    ("/steps/mfu_executed", "skip", 0, 0, "tokens/s over measured peak"),
    # --- /summary: medians of the step metrics -> the class of /steps/<metric> ----------------
    ("/summary@*_median_per_rank", "summary", 0, 0, "class of /steps/<metric>"),
    ("/summary@*_median_max_over_ranks", "summary", 0, 0, "class of /steps/<metric>"),
    ("/summary@*", "exact", 0, 0, "skip_steps, steps_used"),
    # --- /trace --------------------------------------------------------------------------------
    ("/trace/rank*", "trace", 0, 0, "events: names, categories, lanes, steps, micro-batches, "
     "bytes and counts compared; start_s/end_s skipped"),
    # --- anything else (a new dataset in /steps added on both sides, ...) ---------------------
    ("*", "exact", 0, 0, "not listed: compared exactly"),
]

# /@config: `key = value` lines whose value the machine / the launch resolves. Each normaliser
# maps the value to what is compared.
CONFIG_NORMALISE = {
    "out": lambda v: "<result file>" if v else "",            # temp path of each run
    "checkpoint-dir": lambda v: "<checkpoint dir>" if v else "",  # temp path (as --run-local)
    # The default corpus is compiled in as an absolute path into the source tree the binary was
    # built from (HLP_DEFAULT_DATA): compare the file name only.
    "data": lambda v: v.rsplit("/", 1)[-1],
}

# class `text`: regex substitutions applied to both sides before comparing.
TEXT_NORMALISE = {
    "/@peak_flops_source": [(r"best of \d+", "best of N")],
    # "vm,vm" -> "2 host(s)": the names are environment, their count must equal the world size
    "/@hosts": [(r"^.*$", lambda m: f"{len(m.group(0).split(','))} host(s)")],
}

TRACE_TIME_MEMBERS = ("start_s", "end_s")
TRACE_KEY_MEMBERS = ("name", "category", "lane", "micro_batch", "step", "bytes")
# Lanes whose events one thread records in program order: compared as sequences. Other lanes
# (1 = the communication thread) as a multiset: a pipeline stage's asynchronous send and recv
# finish in either order (pp configurations: order differed between runs A-E, multiset equal).
TRACE_ORDERED_LANES = (0, 2)


class Comparison:
    def __init__(self, ref, new, allow_added, all_exact):
        self.ref, self.new = ref, new
        self.allow_added = allow_added
        self.all_exact = all_exact
        self.differences = []
        self.allowed = []
        self.counts = {}

    def diff(self, path, what):
        self.differences.append(f"{path}: {what}")

    def count(self, cls):
        self.counts[cls] = self.counts.get(cls, 0) + 1

    # ---- structure -----------------------------------------------------------------------------
    @staticmethod
    def objects(f):
        """{path: h5py object} of every group and dataset, root included."""
        out = {"/": f}
        f.visititems(lambda name, obj: out.__setitem__("/" + name, obj))
        return out

    def is_allowed_added(self, path):
        candidates = [path]
        obj = path.split("@", 1)[0]
        if "@" in path:
            candidates.append(obj)
        parts = obj.strip("/").split("/") if obj != "/" else []
        for i in range(len(parts)):
            candidates.append("/" + "/".join(parts[:i]))
        # literal first: `[` in `/@config[key]` is a character class to fnmatch
        return any(c == p or fnmatch.fnmatchcase(c, p) for c in candidates for p in self.allow_added)

    def run(self):
        ref_objs, new_objs = self.objects(self.ref), self.objects(self.new)
        for path in sorted(set(ref_objs) - set(new_objs)):
            self.diff(path, f"missing in new ({kind(ref_objs[path])} in ref)")
        for path in sorted(set(new_objs) - set(ref_objs)):
            if self.is_allowed_added(path):
                self.allowed.append(path)
            else:
                self.diff(path, f"added in new ({kind(new_objs[path])}; not in ref, not in --allow-added)")
        for path in sorted(set(ref_objs) & set(new_objs)):
            r, n = ref_objs[path], new_objs[path]
            if kind(r) != kind(n):
                self.diff(path, f"kind differs (ref {kind(r)}, new {kind(n)})")
                continue
            self.compare_attributes(path, r, n)
            if isinstance(r, h5py.Dataset):
                self.compare_dataset(path, r, n)

    def compare_attributes(self, obj_path, r, n):
        ref_names, new_names = set(r.attrs.keys()), set(n.attrs.keys())
        for name in sorted(ref_names - new_names):
            self.diff(attr_path(obj_path, name), "attribute missing in new")
        for name in sorted(new_names - ref_names):
            path = attr_path(obj_path, name)
            if self.is_allowed_added(path):
                self.allowed.append(path)
            else:
                self.diff(path, f"attribute added in new (value {show(n.attrs[name])}; not in --allow-added)")
        for name in sorted(ref_names & new_names):
            path = attr_path(obj_path, name)
            ra, na = h5py.h5a.open(r.id, name.encode()), h5py.h5a.open(n.id, name.encode())
            rt, nt = type_desc(ra.get_type()), type_desc(na.get_type())
            if rt != nt:
                self.diff(path, f"type differs (ref {rt}, new {nt})")
                continue
            if ra.shape != na.shape:
                self.diff(path, f"shape differs (ref {ra.shape}, new {na.shape})")
                continue
            self.compare_value(path, r.attrs[name], n.attrs[name])

    def compare_dataset(self, path, r, n):
        rt, nt = type_desc(r.id.get_type()), type_desc(n.id.get_type())
        if rt != nt:
            self.diff(path, f"type differs (ref {rt}, new {nt})")
            return
        if r.shape != n.shape:
            if self.rule(path)[0] == "trace" and r.ndim == 1 and n.ndim == 1 and r.dtype.names:
                # one row per event: say which events are more or fewer
                self.diff(path, f"shape differs (ref {r.shape}, new {n.shape}): event count by name "
                                f"{event_count_delta(r[()], n[()])}")
            else:
                self.diff(path, f"shape differs (ref {r.shape}, new {n.shape})")
            return
        if r.maxshape != n.maxshape:
            self.diff(path, f"maximum shape differs (ref {r.maxshape}, new {n.maxshape})")
        self.compare_value(path, r[()], n[()])

    # ---- values --------------------------------------------------------------------------------
    def rule(self, path):
        for pattern, cls, rtol, atol, _why in CLASSIFICATION:
            if fnmatch.fnmatchcase(path, pattern):
                if cls == "summary":
                    metric = re.sub(r"_(median_per_rank|median_max_over_ranks)$", "", path.split("@", 1)[1])
                    base = self.rule("/steps/" + metric)
                    return base if base[0] != "trace" else ("exact", 0, 0)
                return cls, rtol, atol
        return "exact", 0, 0

    def compare_value(self, path, ref, new):
        cls, rtol, atol = self.rule(path)
        if self.all_exact:
            cls = "exact" if cls != "trace" else "trace-all"
        self.count(cls.split("-")[0])
        if cls == "skip":
            if is_float_array(ref) and is_float_array(new):
                rn, nn = np.isnan(np.asarray(ref)), np.isnan(np.asarray(new))
                if not np.array_equal(rn, nn):
                    self.diff(path, f"NaN (not reported) cells differ (ref {int(rn.sum())} NaN, new {int(nn.sum())} NaN)")
            return
        if cls == "config":
            return self.compare_config(path, decode(ref), decode(new))
        if cls == "text":
            rs, ns = normalise_text(path, decode(ref)), normalise_text(path, decode(new))
            if rs != ns:
                self.diff(path, f"value differs after normalisation (ref {rs!r}, new {ns!r})")
            return
        if cls.startswith("trace"):
            return self.compare_trace(path, ref, new, ordered_all=(cls == "trace-all"))
        if cls == "float":
            return self.compare_float(path, ref, new, rtol, atol)
        return self.compare_exact(path, ref, new)

    def compare_exact(self, path, ref, new):
        if isinstance(ref, (str, bytes)) or isinstance(new, (str, bytes)):
            if ref != new:
                self.diff(path, f"value differs (ref {show(ref)}, new {show(new)})")
            return
        r, n = np.asarray(ref), np.asarray(new)
        if r.shape != n.shape:
            self.diff(path, f"shape differs (ref {r.shape}, new {n.shape})")
            return
        if r.dtype.kind == "f" and n.dtype.kind == "f":
            both_nan = np.isnan(r) & np.isnan(n)
            same = (r.view(f"u{r.itemsize}") == n.view(f"u{n.itemsize}")) | both_nan
        elif r.dtype.kind == "O" or n.dtype.kind == "O":
            same = np.array([decode(a) == decode(b) for a, b in zip(r.ravel(), n.ravel())]).reshape(r.shape)
        else:
            same = r == n
        same = np.asarray(same)
        if not same.all():
            bad = np.argwhere(~same) if same.ndim else [()]
            i = tuple(bad[0])
            where = f" at {list(i)}" if i else ""
            more = f"; {len(bad)} of {same.size} elements differ" if same.size > 1 else ""
            self.diff(path, f"value differs{where} (ref {show(r[i])}, new {show(n[i])}{more})")

    def compare_float(self, path, ref, new, rtol, atol):
        r, n = np.asarray(ref, dtype=np.float64), np.asarray(new, dtype=np.float64)
        ok = np.isclose(n, r, rtol=rtol, atol=atol, equal_nan=True)
        if not np.asarray(ok).all():
            bad = np.argwhere(~ok) if ok.ndim else [()]
            with np.errstate(all="ignore"):
                rel = np.abs(n - r) / np.abs(r)
            i = tuple(bad[0])
            where = f" at {list(i)}" if i else ""
            more = f"; {len(bad)} of {ok.size} elements differ" if ok.size > 1 else ""
            self.diff(path, f"value differs{where} beyond rtol {rtol:g} atol {atol:g} "
                            f"(ref {r[i]!r}, new {n[i]!r}, relative {float(rel[i]):.3g}{more})")

    def compare_config(self, path, ref, new):
        rl, nl = normalise_config(ref), normalise_config(new)
        if rl == nl:
            return
        if sorted(rl) == sorted(nl):
            self.diff(path, "same lines in another order (first at line "
                            f"{next(i for i, (a, b) in enumerate(zip(rl, nl)) if a != b) + 1}: "
                            f"ref {rl[next(i for i, (a, b) in enumerate(zip(rl, nl)) if a != b)]!r})")
            return
        missing = [x for x in rl if x not in nl]
        added = [x for x in nl if x not in rl]
        for line in missing:
            self.diff(path, f"line differs (ref {line!r}, new "
                            f"{next((a for a in added if a.split('=')[0] == line.split('=')[0]), None)!r})")
        for line in added:
            if not any(m.split("=")[0] == line.split("=")[0] for m in missing):
                key_path = f"{path}[{line.split('=')[0].strip()}]"
                if "=" in line and self.is_allowed_added(key_path):
                    self.allowed.append(key_path)
                else:
                    self.diff(path, f"line added in new ({line!r})")

    def compare_trace(self, path, ref, new, ordered_all=False):
        if ref.dtype.names is None or new.dtype.names is None:
            return self.compare_exact(path, ref, new)
        if ordered_all:  # --all-exact: every member, every row, in order
            for m in ref.dtype.names:
                self.compare_exact(f"{path}[{m}]", ref[m], new[m])
            return
        if len(ref) != len(new):
            self.diff(path, f"event count differs (ref {len(ref)}, new {len(new)}); "
                            f"by name: {event_count_delta(ref, new)}")
            return
        members = [m for m in ref.dtype.names if m not in TRACE_TIME_MEMBERS]
        key = [m for m in TRACE_KEY_MEMBERS if m in members] + [m for m in members if m not in TRACE_KEY_MEMBERS]

        def rows(a, lane=None):
            sel = a if lane is None else a[a["lane"] == lane]
            return [tuple(decode(e[m]) if isinstance(e[m], bytes) else e[m].item() for m in key) for e in sel]

        lanes = sorted(set(ref["lane"].tolist()) | set(new["lane"].tolist())) if "lane" in members else [None]
        for lane in lanes:
            rr, nr = rows(ref, lane), rows(new, lane)
            label = f"{path} lane {lane}" if lane is not None else path
            if lane is not None and lane not in TRACE_ORDERED_LANES:
                rr, nr = sorted(rr), sorted(nr)
            if rr == nr:
                continue
            if len(rr) != len(nr):
                self.diff(label, f"event count differs (ref {len(rr)}, new {len(nr)})")
                continue
            i = next(i for i, (a, b) in enumerate(zip(rr, nr)) if a != b)
            n_bad = sum(a != b for a, b in zip(rr, nr))
            self.diff(label, f"event {i} differs ({', '.join(key)}: ref {rr[i]}, new {nr[i]}; "
                             f"{n_bad} of {len(rr)} events differ)")


# ---- helpers -----------------------------------------------------------------------------------
def kind(obj):
    return "dataset" if isinstance(obj, h5py.Dataset) else "group"


def attr_path(obj_path, name):
    return f"{obj_path}@{name}"


def decode(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray) and v.shape == () and v.dtype.kind in "OSU":
        return decode(v.item())
    return v


def show(v, limit=80):
    v = decode(v)
    if isinstance(v, np.ndarray):
        s = np.array2string(v, threshold=8, precision=17)
    elif isinstance(v, (float, np.floating)):
        s = repr(float(v))
    else:
        s = repr(v.item() if isinstance(v, np.generic) else v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def is_float_array(v):
    return isinstance(v, (np.ndarray, np.floating, float)) and np.asarray(v).dtype.kind == "f"


def type_desc(tid):
    """HDF5 type in words: strings with length kind and charset, compounds with their members."""
    cls = tid.get_class()
    if cls == h5py.h5t.STRING:
        cset = "utf8" if tid.get_cset() == h5py.h5t.CSET_UTF8 else "ascii"
        if tid.is_variable_str():
            return f"vlen-str({cset})"
        pad = {h5py.h5t.STR_NULLTERM: "nullterm", h5py.h5t.STR_NULLPAD: "nullpad",
               h5py.h5t.STR_SPACEPAD: "spacepad"}.get(tid.get_strpad(), "?")
        return f"str[{tid.get_size()}]({cset},{pad})"
    if cls == h5py.h5t.COMPOUND:
        members = [f"{tid.get_member_name(i).decode()}@{tid.get_member_offset(i)}:{type_desc(tid.get_member_type(i))}"
                   for i in range(tid.get_nmembers())]
        return f"compound[{tid.get_size()}]{{{', '.join(members)}}}"
    if cls == h5py.h5t.VLEN:
        return f"vlen({type_desc(tid.get_super())})"
    if cls == h5py.h5t.ARRAY:
        return f"array{tid.get_array_dims()}({type_desc(tid.get_super())})"
    return tid.dtype.str


def normalise_config(text):
    out = []
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            k, v = (s.strip() for s in line.split("=", 1))
            if k in CONFIG_NORMALISE:
                v = CONFIG_NORMALISE[k](v)
            line = f"{k} = {v}"
        out.append(line)
    return out


def normalise_text(path, text):
    for pattern, repl in TEXT_NORMALISE.get(path, []):
        text = re.sub(pattern, repl, text)
    return text


def event_count_delta(ref, new):
    from collections import Counter
    rc = Counter(decode(x) for x in ref["name"]) if "name" in ref.dtype.names else Counter()
    nc = Counter(decode(x) for x in new["name"]) if "name" in new.dtype.names else Counter()
    d = {k: nc[k] - rc[k] for k in sorted(set(rc) | set(nc)) if nc[k] != rc[k]}
    return ", ".join(f"{k} {v:+d}" for k, v in d.items()) or "same names"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring and CLASSIFICATION at the top of this file.")
    p.add_argument("ref", help="reference result file (baseline)")
    p.add_argument("new", help="result file to check")
    p.add_argument("--allow-added", action="append", default=[], metavar="PATH",
                   help="a path (fnmatch pattern) that may exist in NEW only; repeatable")
    p.add_argument("--all-exact", action="store_true", help="compare every value exactly (copies of one file)")
    p.add_argument("--quiet", action="store_true", help="no summary line when there is no difference")
    if "--table" in argv:  # the classification, for review: pattern, class, rtol, atol, why
        for pattern, cls, rtol, atol, why in CLASSIFICATION:
            tol = f"rtol {rtol:g} atol {atol:g}" if cls == "float" else "-"
            print(f"{pattern:40} {cls:8} {tol:22} {why}")
        return 0
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    files = []
    for path in (args.ref, args.new):
        try:
            files.append(h5py.File(path, "r"))
        except OSError as e:
            print(f"compare_results.py: cannot read {path}: {e}", file=sys.stderr)
            return 2
    c = Comparison(files[0], files[1], args.allow_added, args.all_exact)
    c.run()
    for line in c.differences:
        print(line)
    for path in c.allowed:
        print(f"{path}: added in new (allowed by --allow-added)")
    counts = ", ".join(f"{v} {k}" for k, v in sorted(c.counts.items()))
    if c.differences:
        print(f"FAIL {args.new}: {len(c.differences)} difference(s) from {args.ref} (values compared: {counts})")
        return 1
    if not args.quiet:
        print(f"ok {args.new}: same structure and values as {args.ref} (values compared: {counts}"
              f"{', ' + str(len(c.allowed)) + ' allowed addition(s)' if c.allowed else ''})")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    sys.exit(main(sys.argv[1:]))
