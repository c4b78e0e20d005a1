"""Reading HLP result files (``hlp-train --out FILE.h5``) into pandas, by hlp-analyze's rules.

For notebooks: one call loads a directory of result files into DataFrames whose numbers are
the ones ``hlp-analyze table DIR --csv`` prints (same column names, same rules,
same floating-point operations, so they agree to the last bit; ctest
``analysis_python_reader_known`` / ``..._real`` compares every shared cell)::

    import sys; sys.path.insert(0, "analysis/python")   # this folder, from the HLP checkout
    from hlp_results import load_results
    r = load_results("results/", warmup=1)              # dirs and/or .h5 files, like hlp-analyze
    r.configs[["strategy", "world_size", "seq_len", "tokens_per_s_median", "peak_bytes_max"]]
    r.steps.merge(r.runs[["path", "strategy"]], on="path").groupby("strategy").step_time_s.median()
    r.skipped                                           # files left out, one line of reason each

Needs h5py, pandas and numpy (Debian: python3-h5py python3-pandas, installed by ``make deps``;
run with /usr/bin/python3). The rules are analysis/README.md's and the C++ is the reference:
analysis/run_loader.cpp (finding files, the configuration of a file, reduction over ranks,
skips), analysis/aggregate.cpp (warm-up, pooling reruns, medians) and
analysis/table_writer.cpp (the CSV columns). The file layout is docs/results-schema.md.

``load_results(paths, warmup=1, include_incomplete=False)`` returns a ``Results`` with:

``configs``
    one row per configuration (the table's rows, in its order; index ``config_id``). Columns:
    the configuration columns (``CONFIG_COLUMNS``: strategy, dp, pp, tp, cp, ep, world_size,
    ..., attn_impl; integers where every value is one, else the text hlp-analyze prints, with "-"
    for "does not apply" and "?" for "unknown"), ``runs``, ``incomplete_runs``, ``steps_used`` and
    every metric column of ``hlp-analyze table --csv`` except those in ``NOT_REPRODUCED``
    (``step_time_s_median/_min/_max``, ``tokens_per_s_*``, ``tokens_per_s_per_device_median``,
    ``peak_bytes_max``, ``predicted_*``, the ``*_bytes_median`` and ``*_s_median`` columns,
    ``comm_exposed_fraction``, ``pipeline_wait_fraction``, ``cpu_util_median``,
    ``comm_bytes_median``, ``expert_imbalance_median`` and ``all_to_all_mib_per_step_median``
    (sparse MoE models only), ``mfu_model_median``, ``mfu_executed_median``, ``bubble_fraction``,
    ``bubble_fraction_trace``, ``bubble_fraction_theory``, ``bubble_fraction_simulated``,
    ``final_loss``, ``skipped_steps``, ``device_hours``, ``oversubscribed_runs``); absent values
    are NaN (the CSV's empty cells). Extra column ``paths``: the row's files (tuple, load order).
``runs``
    one row per file used (load order): ``path``, ``config_id``, ``complete``,
    ``oversubscribed``, the configuration columns, ``steps`` (in the file), ``steps_used``
    (after the warm-up), ``first_step``, ``last_step``, ``start_time`` / ``end_time`` (UTC
    timestamps; NaT when absent, e.g. a killed run's end), ``start_unix_s``, ``wall_s`` (end −
    start at second resolution, NaN unfinished), ``device_hours`` (wall_s × world size / 3600),
    ``stopped_reason``, ``hosts``, ``slurm_job_id``, ``slurm_array_job_id``,
    ``slurm_array_task_id``, ``git_commit``, ``hlp_version``, ``final_loss`` (last step's
    loss), ``plan_tokens_per_s``, ``bubble_fraction``, ``bubble_fraction_theory``,
    ``bubble_fraction_simulated`` (from /pipeline, NaN when not a pipeline run) and
    ``bubble_fraction_trace`` (this run's trace-measured bubble over its post-warm-up steps).
``steps``
    one row per (file, step): ``path``, ``config_id``, ``step_index`` (column in the file),
    ``step`` (the training step number), ``used`` (False for the warm-up steps the
    configuration columns leave out) and every ``/steps`` metric of the file reduced over ranks
    as hlp-analyze reduces it (NaN ignored, NaN when every rank is NaN): **max** for times and
    bytes, **min** for ``tokens_per_s``, ``tokens_per_s_per_device``, ``mfu``, ``mfu_model``,
    ``mfu_executed``, **mean** for ``loss``, ``lr``, ``grad_norm`` (every other metric, e.g.
    ``eval_loss``, follows run_loader.cpp ``reduction_for()``'s default: max). Also
    ``predicted_peak_bytes``: hlp-plan's peak per rank (param + grad + optimizer +
    activation_predicted bytes), max over ranks. Metrics hlp-analyze does not read are added
    when their shape fits and otherwise left out (hlp-analyze skips a file only for the metrics
    it reads).
``skipped``
    one row per file left out: ``path``, ``reason`` (unreadable, truncated, foreign, no steps,
    damaged; incomplete (``complete`` = 0) unless ``include_incomplete``; a copy of a file
    already loaded, i.e. the same job: start time, Slurm ids, hosts and configuration). The
    same files hlp-analyze skips (reported on its stderr); the reasons are worded alike but not
    byte for byte (h5py's errors are not libhdf5's).

Rules (analysis/README.md, "How numbers are reduced"): per step over ranks as above; the first
``warmup`` steps of EACH file are left out (a shorter file keeps its last step); reruns of one
configuration pool their remaining steps; median / min / max of the pool; ``peak_bytes_max`` =
max over ranks, used steps and runs; ``tokens_per_s_per_device_median`` = median / world size;
``comm_exposed_fraction`` = median over pooled steps of comm_exposed_s / step_time_s;
``all_to_all_mib_per_step_median`` = the median of ``all_to_all_bytes`` (max over ranks) / 2**20;
``final_loss`` = mean over runs of the last step's loss; ``skipped_steps`` counted over all
steps, warm-up included; ``device_hours`` = Σ over runs of wall time × world size / 3600 (NaN
when a run has no end time).

Not reproduced (``NOT_REPRODUCED``; read them from ``hlp-analyze table --csv``):
``bubble_fraction_replay`` and ``bubble_fraction_step_theory`` need the pipeline schedules'
tables and their ideal-clock simulation (src/parallel/pipeline_schedule.h), which are C++ only.
Known divergence, none in practice: a median over values that hold NaN (``comm_exposed_s``
NaN where ``step_time_s`` is not) is unspecified in the C++ (``std::sort`` with NaN); here NaN
sorts last. Integrity checks libhdf5-level only (the global-heap and compact-dataset checks of
src/metrics/result_reader.cpp) are not repeated: such a file fails in h5py instead, or loads.
"""
from __future__ import annotations

import datetime
import functools
import os
import re
import warnings
from dataclasses import dataclass

import h5py
import numpy as np
import pandas as pd

__all__ = ["load_results", "Results", "CONFIG_COLUMNS", "CSV_METRIC_COLUMNS", "NOT_REPRODUCED"]

SCHEMA_VERSION = 1  # src/metrics/schema.h kSchemaVersion: the versions this reader knows

# analysis/run_loader.h config_columns(), in table order
CONFIG_COLUMNS = (
    "strategy", "dp", "pp", "tp", "cp", "ep", "world_size", "device", "model", "pattern",
    "lora_rank", "seq_len", "micro_batch", "global_batch", "micro_batches", "pp_split",
    "pp_schedule", "pp_virtual", "cp_layout", "cp_scheme", "cp_attention", "precision",
    "base_dtype", "act_ckpt", "gdn_mode", "attn_impl")

# analysis/run_loader.cpp analysed_metrics(): the step metrics the table is built from
ANALYSED_METRICS = (
    "loss", "step_time_s", "tokens_per_s", "data_wait_s", "forward_s", "backward_s",
    "optimizer_s", "comm_exposed_s", "comm_bytes", "peak_bytes", "param_bytes", "grad_bytes",
    "optimizer_bytes", "activation_bytes", "mfu_model", "mfu_executed", "pipeline_wait_s",
    "other_s", "cpu_util", "activation_predicted_bytes", "step_skipped", "loss_scale",
    "expert_imbalance", "all_to_all_bytes")

PREDICTED_PEAK = "predicted_peak_bytes"  # run_loader.h kPredictedPeak

# analysis/table_writer.cpp metric_columns(), in CSV order (after runs, incomplete_runs,
# steps_used)
CSV_METRIC_COLUMNS = (
    "step_time_s_median", "step_time_s_min", "step_time_s_max",
    "tokens_per_s_median", "tokens_per_s_min", "tokens_per_s_max",
    "tokens_per_s_per_device_median", "peak_bytes_max", "predicted_peak_bytes_max",
    "predicted_over_measured_peak", "predicted_tokens_per_s",
    "predicted_over_measured_tokens_per_s",
    "param_bytes_median", "grad_bytes_median", "optimizer_bytes_median",
    "activation_bytes_median", "activation_predicted_bytes_median",
    "data_wait_s_median", "forward_s_median", "backward_s_median", "optimizer_s_median",
    "comm_exposed_s_median", "comm_exposed_fraction", "pipeline_wait_s_median",
    "pipeline_wait_fraction", "other_s_median", "cpu_util_median", "comm_bytes_median",
    "expert_imbalance_median", "all_to_all_mib_per_step_median",
    "mfu_model_median", "mfu_executed_median", "bubble_fraction", "bubble_fraction_trace",
    "bubble_fraction_theory", "bubble_fraction_simulated", "bubble_fraction_replay",
    "bubble_fraction_step_theory", "final_loss", "skipped_steps", "device_hours",
    "oversubscribed_runs")

# CSV columns this module does not compute (see the module docstring)
NOT_REPRODUCED = ("bubble_fraction_replay", "bubble_fraction_step_theory")

_NAN = float("nan")
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_INT64_MAX = 2**63 - 1
_TRACE_SPANS = (b"forward", b"backward", b"backward_input", b"backward_weight")  # trace_bubble.cpp


@dataclass
class Results:
    """What load_results() returns; see the module docstring for every column."""
    configs: pd.DataFrame
    runs: pd.DataFrame
    steps: pd.DataFrame
    skipped: pd.DataFrame
    warmup: int

    def __repr__(self):
        return (f"Results({len(self.configs)} configurations, {len(self.runs)} runs, "
                f"{len(self.steps)} steps, {len(self.skipped)} skipped; warmup {self.warmup})")


class _Skip(Exception):
    """A file that cannot be used; the message is the one-line reason."""


# ---- text rules of the C++ (std::stoll / std::stod / parse_ini) --------------------------------

_WS = " \t\n\v\f\r"
_STOLL = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+")
_STOD = re.compile(r"[ \t\n\v\f\r]*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                   r"|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
_STOD_HEX = re.compile(r"[ \t\n\v\f\r]*[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                       r"(?:[pP][+-]?[0-9]+)?")


def _stoll_full(text):
    """RunData::config_int: std::stoll consuming the whole text, else -1 (overflow too)."""
    if not _STOLL.fullmatch(text):
        return -1
    v = int(text)
    return v if -2**63 <= v <= _INT64_MAX else -1


def _stod_full(text):
    """aggregate.cpp numeric(): std::stod consuming the whole text; None when it is not one
    (out of range, i.e. strtod's ERANGE on overflow or underflow, throws there: None too)."""
    if _STOD.fullmatch(text):
        body = text.lstrip(_WS)
        is_nan = body.lower().lstrip("+-").startswith("nan")
        v = float(body.split("(")[0]) if is_nan else float(body)
    elif _STOD_HEX.fullmatch(text):
        body = text.lstrip(_WS)
        if "p" not in body.lower():
            body += "p0"
        v = float.fromhex(body)
    else:
        return None
    low = text.lower()
    if v in (float("inf"), float("-inf")) and "inf" not in low:
        return None  # overflow
    if v == 0.0:
        mantissa = low.lstrip(_WS).lstrip("+-")
        mantissa = (mantissa[2:].split("p")[0] if mantissa.startswith("0x")
                    else mantissa.split("e")[0])
        if re.search(r"[1-9a-f]", mantissa):
            return None  # underflow to zero
    return v


def _parse_ini(text):
    """run_loader.cpp parse_ini(): `key = value` lines, sections / comments / others dropped."""
    out = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        line = line.strip(" \t\r")
        if not line or line[0] in "#;[":
            continue
        eq = line.find("=")
        if eq < 0:
            continue
        out[line[:eq].strip(" \t\r")] = line[eq + 1:].strip(" \t\r")
    return out


_ISO_UTC = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)-[ \t\n\v\f\r]*([+-]?[0-9]+)-"
                      r"[ \t\n\v\f\r]*([+-]?[0-9]+)T[ \t\n\v\f\r]*([+-]?[0-9]+):"
                      r"[ \t\n\v\f\r]*([+-]?[0-9]+):[ \t\n\v\f\r]*([+-]?[0-9]+)(.)", re.DOTALL)


def _iso_utc_seconds(iso):
    """run_loader.cpp iso_utc_seconds(): sscanf "%d-%d-%dT%d:%d:%d%c" with 'Z', then timegm
    (which normalises out-of-range fields); NaN otherwise."""
    m = _ISO_UTC.match(iso)
    if not m or m.group(7) != "Z":
        return _NAN
    year, month, day, hour, minute, sec = (int(g) for g in m.groups()[:6])
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    try:
        days = datetime.date(year, month, 1).toordinal() - _EPOCH_ORDINAL + day - 1
    except (ValueError, OverflowError):
        return _NAN
    return float(days * 86400 + hour * 3600 + minute * 60 + sec)


def _ini_value(ini, key):
    v = ini.get(key, "")
    return "?" if v == "" else v


# ---- attributes, read as strictly as src/metrics/h5_util.cpp reads them ------------------------

def _attr_elements(aid):
    space = aid.get_space()
    if space.get_simple_extent_type() == h5py.h5s.NULL:
        return 0
    return int(space.get_simple_extent_npoints())


def _open_attr(obj, name, where):
    try:
        return obj.attrs.get_id(name)
    except KeyError:
        raise _Skip(f"{where}: {name}: attribute '{name}' is missing "
                    "(the file may be truncated or corrupt)") from None


def _attr_str(obj, name, where):
    aid = _open_attr(obj, name, where)
    if aid.get_type().get_class() != h5py.h5t.STRING:
        raise _Skip(f"{where}: {name}: attribute '{name}' is not a string")
    if _attr_elements(aid) != 1:
        raise _Skip(f"{where}: {name}: attribute '{name}' is not a single string")
    v = obj.attrs[name]
    if isinstance(v, np.ndarray):
        v = v.reshape(-1)[0]
    if isinstance(v, (bytes, np.bytes_)):
        v = bytes(v).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    return str(v).split("\0", 1)[0]


def _attr_number(obj, name, where, kind):
    aid = _open_attr(obj, name, where)
    if _attr_elements(aid) != 1:
        raise _Skip(f"{where}: {name}: attribute '{name}' is not a scalar")
    if aid.get_type().get_class() not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        raise _Skip(f"{where}: {name}: attribute '{name}' is not a number")
    v = np.asarray(obj.attrs[name]).reshape(-1)[0]
    if kind is int:
        if isinstance(v, np.floating) and not np.isfinite(v):
            raise _Skip(f"{where}: {name}: attribute '{name}' is not an integer")
        return int(v)
    return float(v)


def _attr_numbers(obj, name, where, kind):
    aid = _open_attr(obj, name, where)
    if _attr_elements(aid) == 0:
        return []
    if aid.get_type().get_class() not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        raise _Skip(f"{where}: {name}: attribute '{name}' is not numbers")
    v = np.asarray(obj.attrs[name]).reshape(-1)
    return [int(x) for x in v] if kind is int else [float(x) for x in v]


def _attr_or(obj, name, read, default):
    """A root attribute for the `runs` frame only: missing or odd means `default`."""
    try:
        return read(obj, name, "")
    except Exception:  # noqa: BLE001 - descriptive columns never skip a file
        return default


# ---- one file ----------------------------------------------------------------------------------

def _find_result_files(inputs):
    """run_loader.cpp find_result_files(): every *.h5 under each directory (recursively,
    sorted), every file given directly; a missing input is an error (a typo, not a bad job)."""
    files = []
    for given in inputs:
        p = os.fspath(given)
        if os.path.isdir(p):
            found = []
            for root, _dirs, names in os.walk(p):
                for n in names:
                    full = os.path.join(root, n)
                    dot = n.rfind(".")  # std::filesystem extension(): not a leading dot
                    if dot > 0 and n[dot:] == ".h5" and n not in (".", "..") \
                            and os.path.isfile(full):
                        found.append(full)
            found.sort(key=os.fsencode)
            files.extend(found)
        elif os.path.exists(p):
            files.append(p)
        else:
            raise FileNotFoundError(
                f"input '{p}' does not exist (give result directories or .h5 files)")
    return files


def _reduce_over_ranks(m, how):
    """run_loader.cpp reduce_over_ranks(): [ranks, steps] -> [steps], NaN ignored; max / min
    keep the first rank's value among equal extremes (std::max / std::min), mean sums in rank
    order."""
    ranks, steps = m.shape
    out = np.full(steps, _NAN)
    if ranks == 0 or steps == 0:
        return out
    valid = ~np.isnan(m)
    n = valid.sum(axis=0)
    has = n > 0
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if how == "mean":
            acc = np.zeros(steps)
            seen = np.zeros(steps, dtype=bool)
            for r in range(ranks):
                v = m[r]
                ok = valid[r]
                acc = np.where(ok & ~seen, v, np.where(ok, acc + v, acc))
                seen |= ok
            out[has] = acc[has] / n[has].astype(np.float64)
            return out
        ext = np.nanmax(m, axis=0) if how == "max" else np.nanmin(m, axis=0)
        first = np.argmax(valid & (m == ext), axis=0)  # first rank holding the extreme
        picked = m[first, np.arange(steps)]
        out[has] = picked[has]
    return out


def _reduction_for(metric):
    """run_loader.cpp reduction_for()."""
    if metric in ("tokens_per_s", "tokens_per_s_per_device", "mfu", "mfu_model", "mfu_executed"):
        return "min"
    if metric in ("loss", "lr", "grad_norm"):
        return "mean"
    return "max"


def _read_matrix(f, metric, path, file_bytes):
    """ResultReader::steps(): the float64 [ranks, steps] of /steps/<metric>."""
    where = f"{path}: /steps/{metric}"
    ds = f.get(f"steps/{metric}")
    if not isinstance(ds, h5py.Dataset):
        raise _Skip(f"{where}: not a dataset (the file may be truncated or corrupt)")
    if ds.ndim != 2:
        raise _Skip(f"{where}: not a 2-D dataset (the file may be truncated or corrupt)")
    if int(np.prod(ds.shape, dtype=object)) * 8 > file_bytes:
        raise _Skip(f"{where}: its extent claims more data than the whole file "
                    f"({file_bytes} bytes) (the file may be truncated or corrupt)")
    try:
        return np.asarray(ds.astype("f8")[()], dtype=np.float64).reshape(ds.shape)
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"{where}: read: {_one_line(e)} (the file may be truncated or corrupt)") from e


def _one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def _union_length(intervals):
    """trace_bubble.cpp union_length(): total length of [start, end) intervals."""
    total = 0.0
    open_start, open_end = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if start > open_end:
            if open_end > open_start:
                total += open_end - open_start
            open_start, open_end = start, end
        else:
            open_end = max(open_end, end)
    if open_end > open_start:
        total += open_end - open_start
    return total


def _trace_bubble(events_per_rank, mesh, step_numbers):
    """trace_bubble.cpp trace_bubble() without the replay: (sum, count) per step column."""
    dp, pp, tp = mesh
    if dp < 1 or pp < 1 or tp < 1 or dp * pp * tp != len(events_per_rank) \
            or dp * pp > _INT64_MAX or dp * pp * tp > _INT64_MAX:
        raise _Skip(f"mesh dp={dp} pp={pp} tp={tp} does not match {len(events_per_rank)} ranks "
                    "of trace (damaged file)")
    steps = len(step_numbers)
    column_of = {}
    for i, s in enumerate(step_numbers):
        column_of.setdefault(int(s), i)
    spans = [[[] for _ in range(steps)] for _ in events_per_rank]
    any_span = False
    for r, ev in enumerate(events_per_rank):
        for start, end, step in ev:
            col = column_of.get(step)
            if col is not None:
                spans[r][col].append((start, end))
                any_span = True
    sums, counts = [0.0] * steps, [0] * steps
    if not any_span:
        return sums, counts
    for d in range(dp):
        for t in range(tp):
            for col in range(steps):
                w_start, w_end = float("inf"), float("-inf")
                every_stage = True
                for i in range(pp):
                    s = spans[(d * pp + i) * tp + t][col]
                    every_stage = every_stage and bool(s)
                    for start, end in s:  # std::min / std::max
                        w_start = start if start < w_start else w_start
                        w_end = end if w_end < end else w_end
                window = w_end - w_start
                if not every_stage or not window > 0.0:
                    continue
                for i in range(pp):
                    busy = _union_length(spans[(d * pp + i) * tp + t][col])
                    sums[col] += 1.0 - busy / window
                    counts[col] += 1
    return sums, counts


def _read_trace(f, rank, path, file_bytes):
    """ResultReader::trace(), kept to the (start_s, end_s, step) of compute-lane stage spans."""
    where = f"{path}: /trace/rank{rank}"
    ds = f.get(f"trace/rank{rank}")
    if not isinstance(ds, h5py.Dataset):
        raise _Skip(f"{where}: missing (the file may be truncated or corrupt)")
    names = ds.dtype.names or ()
    if set(names) != {"name", "category", "lane", "micro_batch", "start_s", "end_s", "step",
                      "bytes"} or ds.ndim != 1:
        raise _Skip(f"{where}: not a table of trace rows (the file may be truncated or corrupt)")
    if ds.shape[0] * ds.dtype.itemsize > file_bytes:
        raise _Skip(f"{where}: its extent claims more data than the whole file "
                    f"({file_bytes} bytes) (the file may be truncated or corrupt)")
    try:
        rows = ds[()]
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"{where}: read: {_one_line(e)} (the file may be truncated or corrupt)") from e
    if rows.size == 0:
        return []
    keep = np.asarray(rows["lane"]).astype(np.int64) == 0
    out = []
    for name, start, end, step in zip(rows["name"][keep], rows["start_s"][keep],
                                      rows["end_s"][keep], rows["step"][keep]):
        if bytes(name).split(b"\0", 1)[0] in _TRACE_SPANS:
            out.append((float(start), float(end), int(step)))
    return out


def _read_model(f, path):
    """ResultReader::model(): None without /model; a damaged /model skips the file."""
    if "model" not in f:
        return None
    g = f["model"]
    where = f"{path}: /model"
    m = {"name": _attr_str(g, "name", where), "pattern": _attr_str(g, "pattern", where)}
    m["attn_impl"] = _attr_str(g, "attn_impl", where) if "attn_impl" in g.attrs else ""
    for a in ("params_total", "params_trainable"):
        _attr_number(g, a, where, int)
    for a in ("flops_per_token", "flops_per_token_executed"):
        _attr_number(g, a, where, float)
    _attr_str(g, "flops_convention", where)
    _attr_numbers(g, "params_per_rank", where, int)
    m["plan_tokens_per_s"] = _NAN
    if "plan_step_s" in g.attrs:  # files before 2026-11-26 lack the plan
        _attr_str(g, "plan_device", where)
        _attr_number(g, "plan_step_s", where, float)
        m["plan_tokens_per_s"] = _attr_number(g, "plan_tokens_per_s", where, float)
    return m


def _read_pipeline(f, path):
    """ResultReader::pipeline(): None without /pipeline; a damaged one skips the file."""
    if "pipeline" not in f:
        return None
    g = f["pipeline"]
    where = f"{path}: /pipeline"
    _attr_numbers(g, "stage_first_layer", where, int)
    _attr_numbers(g, "stage_cost", where, float)
    _attr_numbers(g, "stage_cost_measured_s", where, float)
    if "stage_cpu_measured_s" in g.attrs:
        _attr_numbers(g, "stage_cpu_measured_s", where, float)
    p = {"bubble_fraction": _attr_number(g, "bubble_fraction", where, float),
         "bubble_fraction_theory": _attr_number(g, "bubble_fraction_theory", where, float),
         "schedule": _attr_str(g, "schedule", where),
         "split": _attr_str(g, "split", where),
         "micro_batches": _attr_number(g, "micro_batches", where, int),
         "virtual_chunks": 1, "bubble_fraction_simulated": _NAN}
    if "virtual_chunks" in g.attrs:
        p["virtual_chunks"] = _attr_number(g, "virtual_chunks", where, int)
    if "bubble_fraction_simulated" in g.attrs:
        p["bubble_fraction_simulated"] = _attr_number(g, "bubble_fraction_simulated", where, float)
    return p


def _check_experts(f, path, world, file_bytes):
    """ResultReader::experts() and run_loader.cpp's check of it: a damaged /experts skips the
    file as in hlp-analyze (which reads it for the figure expert_load; the tables here do not
    need its counts, so only the attributes and the datasets' shapes are read)."""
    if "experts" not in f:
        return
    g = f["experts"]
    where = f"{path}: /experts"
    if not isinstance(g, h5py.Group):
        raise _Skip(f"{where}: not a group (the file may be truncated or corrupt)")
    experts = _attr_number(g, "experts", where, int)
    for a in ("top_k", "ep"):
        _attr_number(g, a, where, int)
    layers = _attr_numbers(g, "layers", where, int)
    _attr_number(g, "first_step", where, int)
    _attr_numbers(g, "all_to_all_bytes", where, int)
    sizes = []
    for name in ("tokens_per_expert", "rank_tokens_per_expert"):
        ds = g.get(name)
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 3:
            raise _Skip(f"{where}: {name}: not a 3-D dataset (the file may be truncated or "
                        "corrupt)")
        if int(np.prod(ds.shape, dtype=object)) * 8 > file_bytes:
            raise _Skip(f"{where}: {name}: its extent claims more data than the whole file "
                        f"({file_bytes} bytes) (the file may be truncated or corrupt)")
        sizes.append(int(np.prod(ds.shape, dtype=object)))
    row = len(layers) * experts
    if experts < 1 or not layers or row > _INT64_MAX or sizes[0] % row != 0 \
            or sizes[1] % world != 0 or sizes[1] // world != row:
        raise _Skip(f"'{path}': /experts holds {sizes[0]} and {sizes[1]} token counts for "
                    f"{len(layers)} layers x {experts} experts (damaged file)")


def _open(path):
    if not os.path.isfile(path):
        raise _Skip(f"result file '{path}' does not exist or is not a file")
    try:
        hdf5 = h5py.is_hdf5(path)
    except Exception:  # noqa: BLE001
        hdf5 = False
    if not hdf5:
        raise _Skip(f"'{path}' is not an HDF5 file (or it is truncated/corrupt)")
    try:
        try:  # no file locking for a read-only open (Lustre mounts without flock)
            return h5py.File(path, "r", locking=False)
        except TypeError:  # h5py < 3.5
            return h5py.File(path, "r")
    except Exception:  # noqa: BLE001
        raise _Skip(f"cannot open '{path}' as HDF5: the file is truncated or corrupt "
                    "(a job killed while writing?)") from None


def _load_one(path):
    """run_loader.cpp load_one(): the configuration and per-step metrics of one file."""
    file_bytes = os.path.getsize(path) if os.path.isfile(path) else 0
    with _open(path) as f:
        return _load_open(f, path, file_bytes)


def _load_open(f, path, file_bytes):
    # ResultReader's constructor
    if "hlp_schema_version" not in f.attrs:
        raise _Skip(f"'{path}' is not an HLP result file (no hlp_schema_version attribute)")
    version = _attr_number(f, "hlp_schema_version", path, int)
    if version < 1 or version > SCHEMA_VERSION:
        raise _Skip(f"'{path}' has HLP schema version {version}; this reader reads "
                    f"1..{SCHEMA_VERSION} (update HLP)")
    world = _attr_number(f, "world_size", path, int)
    for p in ("steps", "steps/step", "trace"):
        try:
            present = p in f
        except Exception:  # noqa: BLE001
            present = False
        if not present:
            raise _Skip(f"'{path}' has no /{p}: damaged or not written by HLP")
    if not isinstance(f["trace"], h5py.Group):
        raise _Skip(f"{path}: /trace: not a group (the file may be truncated or corrupt)")
    trace_links = len(f["trace"])
    if world < 1 or world > trace_links:
        raise _Skip(f"'{path}' has world_size {world} but {trace_links} datasets in /trace "
                    "(corrupt file)")

    run = {"path": path}
    run["complete"] = _attr_number(f, "complete", path, int) == 1
    # run_loader.cpp wall_seconds(): end_time - start_time (second resolution); NaN unfinished
    run["wall_s"] = _NAN
    if "start_time" in f.attrs and "end_time" in f.attrs:
        start = _iso_utc_seconds(_attr_str(f, "start_time", path))
        end = _iso_utc_seconds(_attr_str(f, "end_time", path))
        run["wall_s"] = end - start if end >= start else _NAN
    run["oversubscribed"] = ("oversubscribed" in f.attrs
                             and _attr_number(f, "oversubscribed", path, int) != 0)
    ini = _parse_ini(_attr_str(f, "config", path) if "config" in f.attrs else "")
    c = {}
    c["strategy"] = _attr_str(f, "strategy", path)
    mesh = [world, 1, 1]
    if "mesh" in f.attrs:
        mesh = _attr_numbers(f, "mesh", path, int)
    if len(mesh) != 3:
        raise _Skip(f"'{path}': mesh attribute has {len(mesh)} entries, expected 3 (dp, pp, tp)")
    if min(mesh) < 1:
        raise _Skip(f"'{path}': mesh attribute ({mesh[0]}, {mesh[1]}, {mesh[2]}) holds a size "
                    "below 1 (corrupt file)")
    c["dp"], c["pp"], c["tp"] = (str(v) for v in mesh)
    c["cp"] = "1" if _ini_value(ini, "cp") == "?" else _ini_value(ini, "cp")
    # ep: mesh_sizes' entry for the axis mesh_axes names "ep" (not in `mesh`); 1 without it
    c["ep"] = "1"
    if "mesh_axes" in f.attrs and "mesh_sizes" in f.attrs:
        axes = _attr_str(f, "mesh_axes", path).split(",")
        for axis, size in zip(axes, _attr_numbers(f, "mesh_sizes", path, int)):
            if axis == "ep":
                c["ep"] = str(size)
    c["world_size"] = str(world)
    c["device"] = _attr_str(f, "device", path) if "device" in f.attrs else "?"
    model = _read_model(f, path)
    c["model"] = model["name"] if model and model["name"] else _ini_value(ini, "model")
    if c["model"] == "?":
        c["model"] = _ini_value(ini, "preset")
    c["pattern"] = model["pattern"] if model and model["pattern"] else _ini_value(ini, "pattern")
    c["lora_rank"] = _ini_value(ini, "lora-rank")
    c["seq_len"] = _ini_value(ini, "seq-len")
    c["micro_batch"] = _ini_value(ini, "micro-batch")
    c["global_batch"] = _ini_value(ini, "global-batch")
    c["micro_batches"] = _ini_value(ini, "micro-batches")
    pipeline = _read_pipeline(f, path)
    g_batch, m_batch = _stoll_full(c["global_batch"]), _stoll_full(c["micro_batch"])
    if c["micro_batches"] == "0" and g_batch > 0 and m_batch > 0 \
            and mesh[0] * m_batch <= _INT64_MAX:
        c["micro_batches"] = str(g_batch // (mesh[0] * m_batch))
    if pipeline and pipeline["micro_batches"] > 0:
        c["micro_batches"] = str(pipeline["micro_batches"])
    is_pipeline = mesh[1] > 1
    if is_pipeline:
        c["pp_split"] = pipeline["split"] if pipeline and pipeline["split"] \
            else _ini_value(ini, "pp-split")
        c["pp_schedule"] = pipeline["schedule"] if pipeline and pipeline["schedule"] \
            else _ini_value(ini, "pp-schedule")
        c["pp_virtual"] = str(pipeline["virtual_chunks"] if pipeline else 1)
    else:
        c["pp_split"] = c["pp_schedule"] = c["pp_virtual"] = "-"
    # layout and schemes only under context parallelism; files before --cp-scheme: the chain,
    # before --cp-attention: ring attention
    is_cp = c["cp"] not in ("1", "?")
    c["cp_layout"] = "-" if not is_cp else (_ini_value(ini, "cp-layout") if "cp-layout" in ini
                                            else "zigzag")
    c["cp_scheme"] = "-" if not is_cp else (_ini_value(ini, "cp-scheme") if "cp-scheme" in ini
                                            else "chain")
    c["cp_attention"] = "-" if not is_cp else (_ini_value(ini, "cp-attention")
                                               if "cp-attention" in ini else "ring")
    c["precision"] = _ini_value(ini, "precision")
    c["base_dtype"] = _ini_value(ini, "base-dtype") if "base-dtype" in ini else "fp32"
    c["act_ckpt"] = _ini_value(ini, "activation-checkpointing")
    c["gdn_mode"] = _ini_value(ini, "gdn-mode")
    c["attn_impl"] = model["attn_impl"] if model and model["attn_impl"] \
        else _ini_value(ini, "attn-impl")
    run["config"] = c
    has_pipe = bool(pipeline) and is_pipeline
    run["bubble_fraction"] = pipeline["bubble_fraction"] if has_pipe else None
    run["bubble_fraction_theory"] = pipeline["bubble_fraction_theory"] if has_pipe else None
    sim = pipeline["bubble_fraction_simulated"] if has_pipe else _NAN
    run["bubble_fraction_simulated"] = None if np.isnan(sim) else sim

    # the identity of the job (copies of one file count once)
    job = []
    for a in ("start_unix_s", "start_time", "slurm_job_id", "slurm_array_task_id", "hosts",
              "config"):
        try:
            if a == "start_unix_s":
                job.append("%.17g" % _attr_number(f, a, path, float) if a in f.attrs else "")
            else:
                job.append(_attr_str(f, a, path) if a in f.attrs else "")
        except _Skip:
            job.append("")
    run["job_id"] = tuple(job)

    # /steps
    ds = f["steps/step"]
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1:
        raise _Skip(f"{path}: /steps/step: not a 1-D dataset (the file may be truncated or "
                    "corrupt)")
    if ds.shape[0] * 8 > file_bytes:
        raise _Skip(f"{path}: /steps/step: its extent claims more data than the whole file "
                    f"({file_bytes} bytes) (the file may be truncated or corrupt)")
    try:
        step_numbers = np.asarray(ds.astype("i8")[()], dtype=np.int64).reshape(-1)
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"{path}: /steps/step: read: {_one_line(e)} (the file may be truncated or "
                    "corrupt)") from e
    nsteps = len(step_numbers)
    run["step_numbers"] = step_numbers
    steps_group = f["steps"]
    per_step = {}
    for metric in ANALYSED_METRICS:
        if metric not in steps_group:
            continue
        m = _read_matrix(f, metric, path, file_bytes)
        if m.shape[1] != nsteps:
            raise _Skip(f"'{path}': /steps/{metric} has {m.shape[1]} steps but /steps/step has "
                        f"{nsteps} (damaged file)")
        per_step[metric] = _reduce_over_ranks(m, _reduction_for(metric))
    if nsteps == 0:
        raise _Skip(f"'{path}' holds no steps (the job ended before its first flush)")
    parts = ("activation_predicted_bytes", "param_bytes", "grad_bytes", "optimizer_bytes")
    if all(p in steps_group for p in parts):
        total = _read_matrix(f, parts[0], path, file_bytes).copy()
        for part in parts[1:]:
            m = _read_matrix(f, part, path, file_bytes)
            if m.shape == total.shape:
                total += m
        if total.shape[1] == nsteps:
            per_step[PREDICTED_PEAK] = _reduce_over_ranks(total, "max")
    run["per_step"] = per_step
    run["plan_tokens_per_s"] = model["plan_tokens_per_s"] if model else _NAN
    _check_experts(f, path, world, file_bytes)
    run["trace_bubble"] = None
    if has_pipe:  # the trace is read only for pipeline runs, as in run_loader.cpp
        events = [_read_trace(f, r, path, file_bytes) for r in range(world)]
        try:
            run["trace_bubble"] = _trace_bubble(events, mesh, step_numbers.tolist())
        except _Skip as e:
            raise _Skip(f"'{path}': {e}") from None

    # descriptive extras of the runs frame (hlp-analyze does not use them)
    extra = {}
    for a in ("start_time", "end_time", "stopped_reason", "hosts", "slurm_job_id",
              "slurm_array_job_id", "slurm_array_task_id", "git_commit", "hlp_version"):
        extra[a] = _attr_or(f, a, _attr_str, "" if a not in ("start_time", "end_time") else None)
    extra["start_unix_s"] = _attr_or(f, "start_unix_s",
                                     lambda o, n, w: _attr_number(o, n, w, float), _NAN)
    # the other /steps metrics, for the steps frame only: lenient (hlp-analyze does not read them)
    others = {}
    for metric in steps_group:
        if metric == "step" or metric in per_step or metric in ANALYSED_METRICS:
            continue
        try:
            m = _read_matrix(f, metric, path, file_bytes)
        except _Skip:
            continue
        if m.shape[1] == nsteps:
            others[metric] = _reduce_over_ranks(m, _reduction_for(metric))
    run["other_steps"] = others
    run["extra"] = extra
    return run


def _load_runs(files, include_incomplete):
    """run_loader.cpp load_runs(): (runs, skipped) in file order."""
    runs, skipped, first_path_of_job = [], [], {}
    for path in files:
        try:
            run = _load_one(path)
        except _Skip as e:
            skipped.append((path, str(e)))
            continue
        except Exception as e:  # noqa: BLE001 - h5py / numpy errors of a damaged file
            skipped.append((path, f"{path}: {_one_line(e)} (the file may be truncated or corrupt)"))
            continue
        if run["job_id"] in first_path_of_job:  # the same file twice is a copy too
            skipped.append((path, f"a copy of {first_path_of_job[run['job_id']]} (same job: "
                                  "start time, hosts and configuration); counted once"))
            continue
        first_path_of_job[run["job_id"]] = path
        if not run["complete"] and not include_incomplete:
            skipped.append((path, "incomplete run (complete = 0: killed or still running); "
                                  "use include_incomplete=True to include it"))
            continue
        runs.append(run)
    return runs, skipped


# ---- aggregation (aggregate.cpp) ---------------------------------------------------------------

def _first_used_step(steps, warmup):
    return min(max(0, warmup), steps - 1)


def _median_of(values):
    """aggregate.cpp median_of(): NaN for an empty set; the mean of the middle two when even."""
    if len(values) == 0:
        return _NAN
    v = np.sort(np.asarray(values, dtype=np.float64))
    n = len(v)
    return float(v[n // 2]) if n % 2 == 1 else 0.5 * (float(v[n // 2 - 1]) + float(v[n // 2]))


def _stat_of(pool):
    """aggregate.cpp stat_of(): (median, min, max, n) over the non-NaN values."""
    v = pool[~np.isnan(pool)]
    if v.size == 0:
        return _NAN, _NAN, _NAN, 0
    lo, hi = v.min(), v.max()
    lo = float(v[np.argmax(v == lo)])  # std::min_element: the first of equal values
    hi = float(v[np.argmax(v == hi)])
    return _median_of(v), lo, hi, int(v.size)


def _mean_over_used_steps(sums, counts, steps, warmup):
    if steps == 0 or len(sums) != steps or len(counts) != steps:
        return _NAN
    total, count = 0.0, 0
    for s in range(_first_used_step(steps, warmup), steps):
        total += sums[s]
        count += counts[s]
    return total / count if count > 0 else _NAN


def _run_trace_bubble(run, warmup):
    if run["trace_bubble"] is None:
        return _NAN
    sums, counts = run["trace_bubble"]
    return _mean_over_used_steps(sums, counts, len(run["step_numbers"]), warmup)


def _config_cmp(a, b):
    """aggregate.cpp config_less() as a three-way comparison."""
    for col in CONFIG_COLUMNS:
        x, y = a[col], b[col]
        if x == y:
            continue
        dx, dy = _stod_full(x), _stod_full(y)
        if dx is not None and dy is not None:
            return -1 if dx < dy else (1 if dy < dx else 0)
        bx, by = x.encode("utf-8", "surrogateescape"), y.encode("utf-8", "surrogateescape")
        return -1 if bx < by else 1
    return 0


def _nan_max(acc, values):
    for v in values:
        if not np.isnan(v):
            acc = v if np.isnan(acc) else (v if acc < v else acc)
    return acc


def _aggregate(runs, warmup):
    """aggregate.cpp aggregate(): one dict per configuration, in table order."""
    groups = {}
    for r in runs:
        key = "\x1f".join(r["config"][c] for c in CONFIG_COLUMNS) + "\x1f"
        groups.setdefault(key, []).append(r)
    rows = []
    for key in sorted(groups, key=lambda k: k.encode("utf-8", "surrogateescape")):
        members = groups[key]
        row = dict(members[0]["config"])
        row.update(runs=0, incomplete_runs=0, oversubscribed_runs=0, steps_used=0)
        pool = {}
        comm_fraction, wait_fraction, bubbles, bubbles_trace, bubble_theory = [], [], [], [], []
        bubble_simulated, last_losses, plan_tokens, paths = [], [], [], []
        peak = skipped = predicted_peak = _NAN
        device_hours = 0.0
        with np.errstate(all="ignore"):
            for r in members:
                device_hours += r["wall_s"] * float(_stoll_full(r["config"]["world_size"])) / 3600.0
                row["runs"] += 1
                row["incomplete_runs"] += 0 if r["complete"] else 1
                row["oversubscribed_runs"] += 1 if r["oversubscribed"] else 0
                paths.append(r["path"])
                ps = r["per_step"]
                steps = len(r["step_numbers"])
                first = _first_used_step(steps, warmup)
                row["steps_used"] += steps - first
                for metric, values in ps.items():
                    pool.setdefault(metric, []).append(values[first:])
                st, ce = ps.get("step_time_s"), ps.get("comm_exposed_s")
                pw = ps.get("pipeline_wait_s")
                if st is not None and ce is not None:
                    used = st[first:] > 0.0
                    comm_fraction.extend((ce[first:][used] / st[first:][used]).tolist())
                if st is not None and pw is not None:
                    used = st[first:] > 0.0
                    wait_fraction.extend((pw[first:][used] / st[first:][used]).tolist())
                if "peak_bytes" in ps:
                    peak = _nan_max(peak, ps["peak_bytes"][first:].tolist())
                if PREDICTED_PEAK in ps:
                    predicted_peak = _nan_max(predicted_peak, ps[PREDICTED_PEAK][first:].tolist())
                if not np.isnan(r["plan_tokens_per_s"]):
                    plan_tokens.append(r["plan_tokens_per_s"])
                if "loss" in ps and not np.isnan(ps["loss"][-1]):
                    last_losses.append(float(ps["loss"][-1]))
                if "step_skipped" in ps:
                    for v in ps["step_skipped"].tolist():
                        if not np.isnan(v):
                            skipped = (0.0 if np.isnan(skipped) else skipped) + (1 if v > 0 else 0)
                if r["bubble_fraction"] is not None:
                    bubbles.append(r["bubble_fraction"])
                if r["bubble_fraction_theory"] is not None:
                    bubble_theory.append(r["bubble_fraction_theory"])
                if r["bubble_fraction_simulated"] is not None:
                    bubble_simulated.append(r["bubble_fraction_simulated"])
                tb = _run_trace_bubble(r, warmup)
                if not np.isnan(tb):
                    bubbles_trace.append(tb)
            stats = {m: _stat_of(np.concatenate(v)) for m, v in pool.items()}

            def stat(metric, which):
                s = stats.get(metric)
                return _NAN if s is None or s[3] == 0 else s[which]

            world = _stod_full(row["world_size"])
            world = float(int(world)) if world is not None and np.isfinite(world) else -1.0
            med_tokens = stat("tokens_per_s", 0)
            out = {}
            for m in ("step_time_s", "tokens_per_s"):
                for i, suffix in enumerate(("_median", "_min", "_max")):
                    out[m + suffix] = stat(m, i)
            out["tokens_per_s_per_device_median"] = float(np.float64(med_tokens) / world)
            out["peak_bytes_max"] = peak
            out["predicted_peak_bytes_max"] = predicted_peak
            out["predicted_over_measured_peak"] = float(np.float64(predicted_peak) / peak)
            plan = _median_of(plan_tokens)
            out["predicted_tokens_per_s"] = plan
            out["predicted_over_measured_tokens_per_s"] = float(np.float64(plan) / med_tokens)
            for m in ("param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes",
                      "activation_predicted_bytes", "data_wait_s", "forward_s", "backward_s",
                      "optimizer_s", "comm_exposed_s"):
                out[m + "_median"] = stat(m, 0)
            out["comm_exposed_fraction"] = _median_of(comm_fraction)
            out["pipeline_wait_s_median"] = stat("pipeline_wait_s", 0)
            out["pipeline_wait_fraction"] = _median_of(wait_fraction)
            for m in ("other_s", "cpu_util", "comm_bytes", "expert_imbalance"):
                out[m + "_median"] = stat(m, 0)
            out["all_to_all_mib_per_step_median"] = float(
                np.float64(stat("all_to_all_bytes", 0)) / (1024.0 * 1024.0))
            for m in ("mfu_model", "mfu_executed"):
                out[m + "_median"] = stat(m, 0)
            out["bubble_fraction"] = _median_of(bubbles)
            out["bubble_fraction_trace"] = _median_of(bubbles_trace)
            out["bubble_fraction_theory"] = _median_of(bubble_theory)
            out["bubble_fraction_simulated"] = _median_of(bubble_simulated)
            total = 0.0
            for l in last_losses:
                total += l
            out["final_loss"] = total / len(last_losses) if last_losses else _NAN
            out["skipped_steps"] = skipped
            out["device_hours"] = device_hours
        row.update(out)
        row["paths"] = tuple(paths)
        row["_members"] = members
        rows.append(row)
    rows.sort(key=functools.cmp_to_key(_config_cmp))
    return rows


# ---- frames ------------------------------------------------------------------------------------

def _typed_config_columns(df):
    """Configuration columns whose every value is a canonical integer become int64."""
    for c in CONFIG_COLUMNS:
        if c not in df or len(df) == 0:
            continue
        vals = df[c].tolist()
        if all(re.fullmatch(r"0|-?[1-9][0-9]*", v) and abs(int(v)) <= _INT64_MAX for v in vals):
            df[c] = pd.array([int(v) for v in vals], dtype="int64")
    return df


def _timestamp(text):
    if not text:
        return pd.NaT
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError):
        return pd.NaT
    return t.tz_convert("UTC") if t.tzinfo else t.tz_localize("UTC")


def load_results(paths, warmup=1, include_incomplete=False):
    """Loads result files the way ``hlp-analyze table`` does and returns a ``Results``.

    paths: a directory or .h5 file, or a list of them (directories are searched recursively
    for ``*.h5``, in sorted order; a path that does not exist raises FileNotFoundError).
    warmup: steps left out at the start of each file (``--warmup``, default 1, >= 0).
    include_incomplete: use the flushed steps of killed runs too (``--include-incomplete``).
    Raises ValueError when no usable file is left (hlp-analyze exits 1 then), naming why.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    paths = [os.fsdecode(p) for p in paths]
    if not paths:
        raise ValueError("no inputs: give result directories or .h5 files")
    warmup = int(warmup)
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    files = _find_result_files(paths)
    runs, skipped = _load_runs(files, include_incomplete)
    skipped_df = pd.DataFrame(skipped, columns=["path", "reason"])
    if not runs:
        why = "; ".join(f"{p}: {r}" for p, r in skipped) or "no *.h5 found"
        raise ValueError(f"no usable result files among {len(files)} file(s) found in the "
                         f"inputs ({why})")
    rows = _aggregate(runs, warmup)
    config_id = {}
    for i, row in enumerate(rows):
        for r in row["_members"]:
            config_id[r["path"]] = i

    metric_cols = [c for c in CSV_METRIC_COLUMNS if c not in NOT_REPRODUCED]
    configs = pd.DataFrame(
        [{**{c: row[c] for c in CONFIG_COLUMNS},
          **{c: row[c] for c in ("runs", "incomplete_runs", "steps_used")},
          **{c: float(row[c]) for c in metric_cols}, "paths": row["paths"]} for row in rows],
        columns=[*CONFIG_COLUMNS, "runs", "incomplete_runs", "steps_used", *metric_cols, "paths"])
    configs["oversubscribed_runs"] = configs["oversubscribed_runs"].astype("int64")
    for c in ("runs", "incomplete_runs", "steps_used"):
        configs[c] = configs[c].astype("int64")
    configs.index.name = "config_id"
    _typed_config_columns(configs)

    run_rows, step_frames = [], []
    for r in runs:
        steps = len(r["step_numbers"])
        first = _first_used_step(steps, warmup)
        ps, extra = r["per_step"], r["extra"]
        last_loss = float(ps["loss"][-1]) if "loss" in ps else _NAN
        run_rows.append({
            "path": r["path"], "config_id": config_id[r["path"]], "complete": r["complete"],
            "oversubscribed": r["oversubscribed"], **r["config"], "steps": steps,
            "steps_used": steps - first, "first_step": int(r["step_numbers"][0]),
            "last_step": int(r["step_numbers"][-1]),
            "start_time": _timestamp(extra["start_time"]),
            "end_time": _timestamp(extra["end_time"]),
            "start_unix_s": extra["start_unix_s"], "wall_s": r["wall_s"],
            "device_hours": r["wall_s"] * float(_stoll_full(r["config"]["world_size"])) / 3600.0,
            "stopped_reason": extra["stopped_reason"],
            "hosts": extra["hosts"], "slurm_job_id": extra["slurm_job_id"],
            "slurm_array_job_id": extra["slurm_array_job_id"],
            "slurm_array_task_id": extra["slurm_array_task_id"],
            "git_commit": extra["git_commit"], "hlp_version": extra["hlp_version"],
            "final_loss": last_loss, "plan_tokens_per_s": r["plan_tokens_per_s"],
            "bubble_fraction": _NAN if r["bubble_fraction"] is None else r["bubble_fraction"],
            "bubble_fraction_theory":
                _NAN if r["bubble_fraction_theory"] is None else r["bubble_fraction_theory"],
            "bubble_fraction_simulated":
                _NAN if r["bubble_fraction_simulated"] is None else r["bubble_fraction_simulated"],
            "bubble_fraction_trace": _run_trace_bubble(r, warmup)})
        frame = {"path": [r["path"]] * steps, "config_id": [config_id[r["path"]]] * steps,
                 "step_index": np.arange(steps, dtype=np.int64), "step": r["step_numbers"],
                 "used": np.arange(steps) >= first}
        frame.update(ps)
        frame.update(r["other_steps"])
        step_frames.append(pd.DataFrame(frame))
    runs_df = _typed_config_columns(pd.DataFrame(run_rows))
    steps_df = pd.concat(step_frames, ignore_index=True, sort=False)
    lead = ["path", "config_id", "step_index", "step", "used"]
    metric_order = [m for m in ANALYSED_METRICS if m in steps_df] + \
        ([PREDICTED_PEAK] if PREDICTED_PEAK in steps_df else [])
    rest = sorted(c for c in steps_df.columns if c not in lead and c not in metric_order)
    steps_df = steps_df[lead + metric_order + rest]
    return Results(configs=configs, runs=runs_df, steps=steps_df, skipped=skipped_df,
                   warmup=warmup)
