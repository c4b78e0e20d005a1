#include "analysis/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "analysis/figure_data.h"
#include "analysis/gnuplot.h"
#include "metrics/schema.h"

namespace hlp::analysis {
namespace schema = metrics::schema;
namespace {

constexpr size_t kMaxLossCurves = 12;

Figure scaling(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure("scaling", "Throughput vs ranks",
             "Global tokens/s (median after warm-up) against the number of ranks for each "
             "strategy, with a dashed ideal line scaling its smallest run linearly; a `single` "
             "run of the same configuration is each strategy's 1-rank point.");
  std::vector<std::string> cols = kModelSlice;
  cols.push_back("seq_len");
  const auto slice = best_slice(all_rows(rows), cols, "world_size");
  auto series = series_by_strategy(slice, "world_size",
                                   [](const ConfigRow& r) { return r.median(schema::kTokensPerS); });
  const Series* single = nullptr;
  for (const auto& s : series)
    if (s.name == "single") single = &s;
  std::vector<Series> plotted;
  for (auto s : series) {
    if (s.name == "single") continue;
    if (single && !single->points.empty() && s.points.front().first > 1.0)
      s.points.insert(s.points.begin(), single->points.front());
    if (s.points.size() >= 2) plotted.push_back(s);
  }
  if (plotted.empty()) {
    fig.skip_reason = "no strategy was measured at two or more world sizes (a `single` run of the "
                      "same configuration counts as its 1-rank point)";
    return fig;
  }
  write_series(dir + "/scaling.dat", plotted, "ranks  tokens_per_s  ideal_tokens_per_s", true);
  write_gnuplot_script(dir, "scaling",
                       "set title 'Global throughput vs ranks (" + slice.front()->value("model") +
                           ", seq-len " + slice.front()->value("seq_len") + ")'\n"
                           "set xlabel 'ranks (world size)'\nset ylabel 'tokens/s (global)'\n"
                           "set logscale x 2\nset yrange [0:*]\n" +
                           series_plot("scaling.dat", plotted, true));
  fig.has_data = true;
  return fig;
}

// The rows of a context-length figure: world size and checkpointing become series, not slices
// (a context sweep compares them); one line per strategy, world size and checkpointing.
std::vector<const ConfigRow*> context_slice(const std::vector<ConfigRow>& rows) {
  std::vector<std::string> cols;
  for (const auto& c : kModelSlice)
    if (c != "act_ckpt") cols.push_back(c);
  return best_slice(all_rows(rows), cols, "seq_len");
}

std::string context_series_name(const ConfigRow& r) {
  return label(r) + (r.value("act_ckpt") == "true" ? " +ckpt" : "");
}

Figure context(const std::vector<ConfigRow>& rows, const std::string& dir, bool memory) {
  Figure fig = memory
      ? make_figure("context_memory", "Peak memory vs context length",
               "Peak bytes per rank (max over ranks and steps) against the sequence length, one "
               "line per strategy, world size and activation checkpointing (+ckpt): context "
               "parallelism is one line per cp (`cp n=2`, `cp n=4`, `ddp+cp2 n=4`); log-log "
               "axes, so memory linear in T rises with slope 1 and quadratic with slope 2.")
      : make_figure("context_throughput", "Throughput vs context length",
               "Global tokens/s (median after warm-up) against the sequence length, one line "
               "per strategy, world size and activation checkpointing (+ckpt), one per cp for "
               "context parallelism.");
  const auto slice = context_slice(rows);
  auto series = series_by(slice, "seq_len", context_series_name, [memory](const ConfigRow& r) {
    return memory ? r.peak_bytes_max / kMiB : r.median(schema::kTokensPerS);
  });
  series.erase(std::remove_if(series.begin(), series.end(),
                              [](const Series& s) { return s.points.size() < 2; }),
               series.end());
  if (series.empty()) {
    fig.skip_reason = "no strategy was measured at two or more sequence lengths with the same world size";
    return fig;
  }
  write_series(dir + "/" + fig.name + ".dat", series,
               memory ? "seq_len  peak_MiB" : "seq_len  tokens_per_s", false);
  write_gnuplot_script(
      dir, fig.name,
      "set title '" + std::string(memory ? "Peak memory per rank" : "Global throughput") +
          " vs context length (" + slice.front()->value("model") + ")'\n"
          "set xlabel 'sequence length (tokens)'\nset logscale x 2\n" +
          std::string(memory ? "set logscale y 2\n" : "set yrange [0:*]\n") +
          "set ylabel '" + std::string(memory ? "peak MiB per rank" : "tokens/s (global)") + "'\n" +
          series_plot(fig.name + ".dat", series, false));
  fig.has_data = true;
  return fig;
}

// Measured activation bytes (peak minus the held parts) over hlp-train's prediction
// (train/activation_model.h) against T, one line per series: 1 = predicted exactly.
Figure context_activation(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure(
      "context_activation", "Activation memory vs context length: measured / predicted",
      "Per-rank activation bytes (peak minus parameters, gradients and optimizer state; median "
      "after warm-up, max over ranks) divided by the activation peak hlp-train predicted before "
      "the first step from its per-layer-kind probe at T = 128 and 256 "
      "(`activation_predicted_bytes`), against the sequence length; 1 = predicted exactly.");
  const auto slice = context_slice(rows);
  auto series = series_by(slice, "seq_len", context_series_name, [](const ConfigRow& r) {
    return r.median(schema::kActivationBytes) / r.median(schema::kActivationPredicted);
  });
  series.erase(std::remove_if(series.begin(), series.end(),
                              [](const Series& s) { return s.points.size() < 2; }),
               series.end());
  if (series.empty()) {
    fig.skip_reason = "no configuration with hlp-train's activation prediction was measured at "
                      "two or more sequence lengths";
    return fig;
  }
  write_series(dir + "/" + fig.name + ".dat", series, "seq_len  measured_over_predicted", false);
  write_gnuplot_script(dir, fig.name,
                       "set title 'Activation memory per rank: measured / predicted (" +
                           slice.front()->value("model") + ")'\n"
                           "set xlabel 'sequence length (tokens)'\nset logscale x 2\n"
                           "set yrange [0.5:1.5]\nset ylabel 'measured / predicted'\n" +
                           series_plot(fig.name + ".dat", series, false));
  fig.has_data = true;
  return fig;
}

// One bar per strategy: its row with the most ranks in the slice with the most strategies.
std::vector<const ConfigRow*> one_row_per_strategy(const std::vector<ConfigRow>& rows) {
  std::vector<std::string> cols = kModelSlice;
  cols.push_back("seq_len");
  const auto slice = best_slice(all_rows(rows), cols, "strategy");
  std::map<std::string, const ConfigRow*> pick;
  for (const ConfigRow* r : slice) {
    auto& p = pick[r->value("strategy")];
    if (!p || r->world_size() > p->world_size()) p = r;
  }
  std::vector<const ConfigRow*> out;
  for (const auto& [s, r] : pick) out.push_back(r);
  return out;
}

Figure stacked(const std::vector<ConfigRow>& rows, const std::string& dir, bool memory) {
  Figure fig = memory
      ? make_figure("memory_breakdown", "Peak memory breakdown per strategy",
               "Per-rank bytes each strategy holds for parameters, gradients, optimizer state and "
               "activations (medians after warm-up, stacked; the bar top is the measured peak "
               "unless the strategy reports its own parts).")
      : make_figure("step_time_breakdown", "Step-time breakdown per strategy",
               "Median per-step seconds of the slowest rank split into data wait, forward, "
               "backward, optimizer, exposed (not overlapped) communication, pipeline wait "
               "(a stage idle for its neighbour; only when a pipeline run is shown) and the rest.");
  const auto picked = one_row_per_strategy(rows);
  bool any_pipeline = false;
  for (const ConfigRow* r : picked) any_pipeline = any_pipeline || r->config_int("pp") > 1;
  std::vector<std::string> parts =
      memory ? std::vector<std::string>{schema::kParamBytes, schema::kGradBytes,
                                        schema::kOptimizerBytes, schema::kActivationBytes}
             : std::vector<std::string>{schema::kDataWait, schema::kForward, schema::kBackward,
                                        schema::kOptimizer, schema::kCommExposed};
  std::vector<std::string> titles =
      memory ? std::vector<std::string>{"parameters", "gradients", "optimizer", "activations"}
             : std::vector<std::string>{"data wait", "forward", "backward", "optimizer",
                                        "exposed comm"};
  if (!memory && any_pipeline) {  // a column that applies only to pipelines
    parts.push_back(schema::kPipelineWait);
    titles.push_back("pipeline wait");
  }
  if (!memory) titles.push_back("other");
  std::ostringstream dat;
  dat << "# label";
  for (const auto& p : parts) dat << " " << p;
  if (!memory) dat << " other_s";
  dat << (memory ? "   (MiB)\n" : "   (ms)\n");
  int bars = 0;
  for (const ConfigRow* r : picked) {
    double sum = 0.0;
    bool any = false;
    std::ostringstream line;
    line << "\"" << label(*r) << "\"";
    for (const auto& p : parts) {
      double v = r->median(p);
      any = any || !std::isnan(v);
      v = std::isnan(v) ? 0.0 : v;
      sum += v;
      line << " " << num(memory ? v / kMiB : v * 1e3);
    }
    if (!memory) line << " " << num(std::max(0.0, r->median(schema::kStepTime) - sum) * 1e3);
    if (!any) continue;
    dat << line.str() << "\n";
    ++bars;
  }
  if (bars == 0) {
    fig.skip_reason = memory ? "no run recorded parameter/gradient/optimizer/activation bytes"
                             : "no run recorded the step-time split";
    return fig;
  }
  std::ofstream(dir + "/" + fig.name + ".dat") << dat.str();
  std::ostringstream body;
  const ConfigRow& ref = *picked.front();
  body << "set title '" << fig.title << " (" << ref.value("model") << ", seq-len "
       << ref.value("seq_len") << ", micro-batch " << ref.value("micro_batch") << ")'\n"
       << "set style data histograms\nset style histogram rowstacked\n"
       << "set style fill solid 0.85 border -1\nset boxwidth 0.6\nset yrange [0:*]\n"
       << "set ylabel '" << (memory ? "MiB per rank" : "ms per step") << "'\n"
       << "set xtics rotate by -20\n";
  body << "plot ";
  for (size_t i = 0; i < titles.size(); ++i) {
    if (i) body << ", \\\n     ";
    body << "'" << fig.name << ".dat' using " << i + 2 << (i == 0 ? ":xtic(1)" : "")
         << " title " << gp_quote(titles[i]);
  }
  write_gnuplot_script(dir, fig.name, body.str());
  fig.has_data = true;
  return fig;
}

// hlp-plan against the measurement: one pair of bars per configuration that carries a prediction.
Figure plan_accuracy(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure(
      "plan_accuracy", "hlp-plan: predicted / measured peak memory and tokens/s",
      "For every configuration whose runs carry hlp-plan's prediction (written by hlp-train "
      "before the first step): its predicted peak per rank over the measured peak (max over "
      "ranks and steps), and its predicted tokens/s over the measured median; 1 = exact. The "
      "time model is uncalibrated unless the run's device row was (hlp-plan --calibrate).");
  std::ostringstream dat;
  dat << "# label peak_predicted_over_measured tokens_per_s_predicted_over_measured\n";
  int bars = 0;
  for (const ConfigRow& r : rows) {
    const double peak = r.predicted_peak_bytes_max / r.peak_bytes_max;
    const double tokens = r.plan_tokens_per_s / r.median(schema::kTokensPerS);
    if (std::isnan(peak) && std::isnan(tokens)) continue;
    dat << "\"" << label(r) << " T" << r.value("seq_len")
        << (r.value("act_ckpt") == "true" ? " ckpt" : "") << "\" " << num(peak) << " "
        << num(tokens) << "\n";
    ++bars;
  }
  if (bars == 0) {
    fig.skip_reason = "no run carries hlp-plan's prediction (result files before 2026-11-26)";
    return fig;
  }
  std::ofstream(dir + "/" + fig.name + ".dat") << dat.str();
  std::ostringstream body;
  body << "set title '" << fig.title << "'\n"
       << "set style data histograms\nset style histogram clustered gap 1\n"
       << "set style fill solid 0.85 border -1\nset yrange [0:2]\n"
       << "set ylabel 'predicted / measured'\nset xtics rotate by -30\n"
       << "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2\n"
       << "plot '" << fig.name << ".dat' using 2:xtic(1) title 'peak memory per rank', \\\n"
       << "     '" << fig.name << ".dat' using 3 title 'tokens/s'\n";
  write_gnuplot_script(dir, fig.name, body.str());
  fig.has_data = true;
  return fig;
}

// The pipeline bubble a figure shows for a row: the one measured from the trace, or the
// strategy's in-process value when none of the row's runs has a trace (*from_trace says which).
double shown_bubble(const ConfigRow& r, bool* from_trace) {
  *from_trace = !std::isnan(r.bubble_fraction_trace);
  return *from_trace ? r.bubble_fraction_trace : r.bubble_fraction;
}

// The pipeline a bubble series is about: "p=2 1f1b", "p=2 interleaved V=2", "p=4 zb-h1", and
// "LoRA r8" / "full" after it when the figure holds both finetunes.
std::string schedule_series_name(const ConfigRow& r, bool name_finetune) {
  std::string name = "p=" + r.value("pp") + " " + r.value("pp_schedule");
  const std::string v = r.value("pp_virtual");
  if (r.value("pp_schedule") == "interleaved" && !v.empty() && v != "-") name += " V=" + v;
  if (name_finetune)
    name += r.value("lora_rank") == "0" ? " full" : " LoRA r" + r.value("lora_rank");
  return name;
}

Figure bubble(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure("pipeline_bubble", "Pipeline bubble vs micro-batches",
             "Pipeline bubble against the number of micro-batches m for each stage count p and "
             "schedule: points are measured from the trace events (idle share of the step's "
             "pipeline window, mean over stages and steps after warm-up; definition in "
             "analysis/README.md), dashed lines each schedule's own theory (docs/strategies.md: "
             "(p-1)/(m+p-1) for gpipe and 1f1b, divided by V for interleaved, zero bubble's "
             "(p-1)(F+B-W) at the run's measured F, B and W: equal stages), crosses the step "
             "theory (the schedule's tables at each step's measured mean F, B and W per chunk: "
             "the stages as unequal as they were).");
  // series -> m -> bubble, apart for rows measured from the trace and rows without a trace;
  // series -> m -> the row's theory
  std::map<std::string, std::map<double, double>> traced, untraced, theory, step_theory;
  std::vector<std::string> fallbacks;
  std::set<std::string> lora_ranks;
  for (const auto& r : rows)
    if (r.config_int("pp") > 1) lora_ranks.insert(r.value("lora_rank"));
  for (const auto& r : rows) {
    const int64_t p = r.config_int("pp"), m = r.config_int("micro_batches");
    bool from_trace = false;
    const double b = shown_bubble(r, &from_trace);
    if (p <= 1 || m <= 0 || std::isnan(b)) continue;
    const std::string name = schedule_series_name(r, lora_ranks.size() > 1);
    if (from_trace) {
      traced[name].emplace(double(m), b);
      if (!std::isnan(r.bubble_fraction_step_theory))
        step_theory[name].emplace(double(m), r.bubble_fraction_step_theory);
    } else if (untraced[name].emplace(double(m), b).second) {
      fallbacks.push_back(name + " m=" + std::to_string(m));
    }
    if (!std::isnan(r.bubble_fraction_theory))
      theory[name].emplace(double(m), r.bubble_fraction_theory);
  }
  if (traced.empty() && untraced.empty()) {
    fig.skip_reason = "no pipeline run (pp > 1 with /pipeline or a trace) among the inputs";
    return fig;
  }
  if (!fallbacks.empty()) {
    fig.sentence += " Runs without a trace (";
    for (size_t i = 0; i < fallbacks.size(); ++i) fig.sentence += (i ? ", " : "") + fallbacks[i];
    fig.sentence += ") are drawn with the pipeline strategy's in-process value (step wall time "
                    "minus forward and backward per stage) as open markers.";
  }
  std::set<std::string> names;
  double max_m = 1.0;
  std::vector<Series> series;
  enum class Kind { traced, untraced, theory, step_theory };
  std::vector<Kind> kinds;
  std::vector<std::string> series_of;
  for (const auto* by_name : {&traced, &untraced, &theory, &step_theory})
    for (const auto& [name, pts] : *by_name) {
      const Kind kind = by_name == &traced     ? Kind::traced
                        : by_name == &untraced ? Kind::untraced
                        : by_name == &theory   ? Kind::theory
                                               : Kind::step_theory;
      names.insert(name);
      max_m = std::max(max_m, pts.rbegin()->first);
      series.push_back({name + (kind == Kind::traced     ? " trace"
                                : kind == Kind::untraced ? " in-process (no trace)"
                                : kind == Kind::theory   ? " theory"
                                                         : " step theory"),
                        {pts.begin(), pts.end()}});
      kinds.push_back(kind);
      series_of.push_back(name);
    }
  write_series(dir + "/pipeline_bubble.dat", series, "micro_batches  bubble_fraction", false);
  // One colour per pipeline (p, schedule, V): its points (filled: trace, open: in-process,
  // cross: step theory) and its theory as a dashed line through the theory at each m.
  std::map<std::string, size_t> colour;
  for (const auto& name : names) colour.emplace(name, colour.size() + 1);
  std::ostringstream body;
  body << "set title 'Pipeline bubble vs micro-batches'\nset xlabel 'micro-batches m'\n"
       << "set ylabel 'bubble fraction of the step'\nset yrange [0:*]\n"
       << "set key outside right\nset xrange [0.5:" << num(max_m + 0.5) << "]\nplot ";
  for (size_t i = 0; i < series.size(); ++i) {
    body << (i ? ", \\\n     " : "") << "'pipeline_bubble.dat' index " << i << " using 1:2 with "
         << (kinds[i] == Kind::theory ? std::string("lines dt 2 lw 2")
                                      : "points pt " +
                                            std::string(kinds[i] == Kind::traced     ? "7"
                                                        : kinds[i] == Kind::untraced ? "6"
                                                                                     : "2") +
                                            " ps 1.8")
         << " lc " << colour[series_of[i]] << " title " << gp_quote(series[i].name);
  }
  write_gnuplot_script(dir, "pipeline_bubble", body.str());
  fig.has_data = true;
  return fig;
}

Figure split_ablation(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure("split_ablation", "Pipeline split ablation",
             "Global tokens/s of one pipeline configuration under each stage split (uniform by "
             "layer count, params by trainable parameters, balanced by per-layer cost), with the "
             "bubble measured from the trace (the in-process value for runs without a trace) in "
             "the bar label.");
  std::vector<const ConfigRow*> pipe;
  for (const auto& r : rows)
    if (r.config_int("pp") > 1) pipe.push_back(&r);
  std::vector<std::string> cols = config_columns();
  cols.erase(std::find(cols.begin(), cols.end(), "pp_split"));
  const auto slice = best_slice(pipe, cols, "pp_split");
  std::set<std::string> splits;
  for (const ConfigRow* r : slice) splits.insert(r->value("pp_split"));
  if (splits.size() < 2) {
    fig.skip_reason = "no pipeline configuration was measured with two or more stage splits";
    return fig;
  }
  std::ofstream dat(dir + "/split_ablation.dat");
  dat << "# split tokens_per_s bubble_percent\n";
  for (const ConfigRow* r : slice) {
    bool from_trace = false;
    const double bubble_fraction = shown_bubble(*r, &from_trace);
    dat << "\"" << r->value("pp_split") << "\" " << num(r->median(schema::kTokensPerS)) << " "
        << num(100.0 * bubble_fraction) << "\n";
  }
  dat.close();
  const ConfigRow& ref = *slice.front();
  write_gnuplot_script(
      dir, "split_ablation",
      "set title 'Pipeline split ablation (" + ref.value("strategy") + ", pp=" + ref.value("pp") +
          ", m=" + ref.value("micro_batches") + ", " + ref.value("pp_schedule") + ")'\n"
          "set style data histograms\nset style fill solid 0.85 border -1\nset boxwidth 0.6\n"
          "set yrange [0:*]\nset ylabel 'tokens/s (global)'\nset offsets 0, 0, graph 0.1, 0\n"
          "plot 'split_ablation.dat' using 2:xtic(1) title 'tokens/s', \\\n"
          "     '' using 0:2:(sprintf('bubble %.1f%%', $3)) with labels offset 0,1 notitle\n");
  fig.has_data = true;
  return fig;
}

Figure loss_curves(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure("loss_curves", "Loss curves",
             "Training loss per step (mean over ranks and reruns) of each configuration, "
             "overlaid: strategies of one model and data order should lie on top of each other.");
  std::vector<Series> series;
  for (const auto& r : rows) {
    if (r.loss_curve.size() < 1 || series.size() >= kMaxLossCurves) continue;
    Series s{label(r) + " T=" + r.value("seq_len") + " B=" + r.value("micro_batch"), {}};
    for (const auto& [step, loss] : r.loss_curve) s.points.push_back({double(step), loss});
    series.push_back(s);
  }
  if (series.empty()) {
    fig.skip_reason = "no run recorded a loss";
    return fig;
  }
  if (rows.size() > kMaxLossCurves)
    fig.sentence += " Only the first " + std::to_string(kMaxLossCurves) +
                    " configurations of the table are drawn.";
  write_series(dir + "/loss_curves.dat", series, "step  loss", false);
  write_gnuplot_script(dir, "loss_curves",
                       "set title 'Training loss per step'\nset xlabel 'step'\n"
                       "set ylabel 'loss (nats/token)'\n" +
                           series_plot("loss_curves.dat", series, false));
  fig.has_data = true;
  return fig;
}

// Routing balance of models with sparse MoE layers: per configuration, each sparse layer's
// busiest expert over its mean expert against the layer's index; 1 = even routing.
Figure expert_load(const std::vector<ConfigRow>& rows, const std::string& dir) {
  Figure fig = make_figure(
      "expert_load", "Expert load per sparse layer",
      "For every configuration whose model has sparse mixture-of-experts layers (`/experts`): "
      "the (token, k) slots each sparse layer routed to its busiest expert over the mean over "
      "its experts, against the layer's index in the model, one line per configuration; slots "
      "over every rank's tokens, summed over every step of the configuration's runs (reruns "
      "pooled, warm-up included). The dashed line at 1 is even routing. The table's "
      "`expert_imbalance` is the same ratio per step, worst layer, median over the steps.");
  std::vector<Series> series;
  for (const auto& r : rows) {
    const ExpertLoad& load = r.expert_load;
    Series s{r.value("model") + " " + label(r) + " T=" + r.value("seq_len"), {}};
    for (size_t l = 0; l < load.layers.size(); ++l) {  // model order: x increasing
      const double y = load.imbalance(l);
      if (!std::isnan(y)) s.points.push_back({double(load.layers[l]), y});
    }
    if (!s.points.empty()) series.push_back(s);
  }
  if (series.empty()) {
    fig.skip_reason = "no run has sparse MoE layers (no `/experts` in the result files)";
    return fig;
  }
  // x: the layers drawn and half a layer either side (the line at 1 spans it), integer tics
  double first_layer = series.front().points.front().first, last_layer = first_layer;
  for (const auto& s : series) {
    first_layer = std::min(first_layer, s.points.front().first);
    last_layer = std::max(last_layer, s.points.back().first);
  }
  const double tic = std::max(1.0, std::ceil((last_layer - first_layer) / 12.0));
  write_series(dir + "/expert_load.dat", series, "layer  busiest_expert_over_mean", false);
  write_gnuplot_script(dir, "expert_load",
                       "set title 'Expert load: busiest expert / mean expert per sparse layer'\n"
                       "set xlabel 'sparse layer (index in the model)'\n"
                       "set ylabel 'slots of the busiest expert / mean'\n"
                       "set xrange [" + num(first_layer - 0.5) + ":" + num(last_layer + 0.5) +
                           "]\nset xtics " + num(tic) + "\nset yrange [0:*]\n" +
                           series_plot("expert_load.dat", series, false) +
                           ", \\\n     1 with lines dt 2 lw 2 lc rgb 'black' title 'even routing'");
  fig.has_data = true;
  return fig;
}

// One cp size of cp_schemes: step time and exposed communication against T, one colour per
// pair of schemes (the G layers' state / the attention layers'), in the slice of `cp_rows` that
// has the most points.
Figure cp_schemes_figure(int64_t cp, const std::vector<const ConfigRow*>& cp_rows,
                         const std::string& dir) {
  const std::string n = std::to_string(cp), name = "cp_schemes_cp" + n;
  Figure fig = make_figure(
      name, "Context-parallel schemes, cp " + n,
      "Runs with context parallelism over " + n + " ranks: the median step time (slowest rank, "
      "after warm-up; solid) and the exposed communication (dashed) against the sequence "
      "length, one colour per pair of schemes: the G layers' state (`--cp-scheme`: chain, "
      "allgather, alltoall) / the attention layers' (`--cp-attention`: ring, alltoall). Exposed "
      "communication = median `comm_exposed_s` (blocked in collectives: the all-gathers and "
      "all-to-alls) + median `pipeline_wait_s` (blocked in point-to-point exchanges: the state "
      "chain's hops, the halos, ring attention's shifts), so that every scheme's waits count. "
      "Log-log axes; a point of 0 s exposed is not drawn.");
  // Every configuration column but T and the two schemes is held (cp is the figure's own): the
  // schemes of one experiment. No column to maximise (""): the slice with the most points wins.
  std::vector<std::string> held;
  for (const auto& c : config_columns())
    if (c != "seq_len" && c != "cp_scheme" && c != "cp_attention") held.push_back(c);
  const auto slice = best_slice(cp_rows, held, "");
  struct Point {
    double step_s, collectives_s, point_to_point_s;
  };
  std::map<std::string, std::map<double, Point>> pairs;  // "chain / ring" -> T -> medians
  for (const ConfigRow* r : slice) {
    const double t = double(r->config_int("seq_len"));
    const double step = r->median(schema::kStepTime);
    if (t <= 0 || std::isnan(step)) continue;
    pairs[r->value("cp_scheme") + " / " + r->value("cp_attention")].emplace(
        t, Point{step, r->median(schema::kCommExposed), r->median(schema::kPipelineWait)});
  }
  if (pairs.empty()) {
    fig.skip_reason = "no cp " + n + " run recorded a step time at a known sequence length";
    return fig;
  }
  if (slice.size() < cp_rows.size())
    fig.sentence += " " + std::to_string(cp_rows.size() - slice.size()) + " other cp " + n +
                    " configuration(s) (another model, strategy, world size or setting) are not "
                    "drawn.";
  std::ofstream dat(dir + "/" + name + ".dat");
  dat << "# cp " << n << ": one block per pair of schemes (state / attention); medians in s; "
      << "exposed_comm_s = comm_exposed_s + pipeline_wait_s\n"
      << "# seq_len  step_time_s  exposed_comm_s  comm_exposed_s  pipeline_wait_s\n";
  const auto zero_if_nan = [](double v) { return std::isnan(v) ? 0.0 : v; };
  std::ostringstream plot;
  plot << "plot ";
  size_t i = 0;
  for (const auto& [pair, points] : pairs) {
    dat << "# series: " << pair << "\n";
    for (const auto& [t, p] : points) {
      // a file without one of the two wait metrics counts it as 0; without both: no value
      const double exposed = std::isnan(p.collectives_s) && std::isnan(p.point_to_point_s)
                                 ? std::nan("")
                                 : zero_if_nan(p.collectives_s) + zero_if_nan(p.point_to_point_s);
      dat << num(t) << " " << num(p.step_s) << " " << num(exposed) << " " << num(p.collectives_s)
          << " " << num(p.point_to_point_s) << "\n";
    }
    dat << "\n\n";
    const std::string lc = std::to_string(i + 1), block = std::to_string(i);
    plot << (i ? ", \\\n     " : "") << "'" << name << ".dat' index " << block
         << " using 1:2 with linespoints lw 2 pt 7 ps 1.5 lc " << lc << " title "
         << gp_quote(pair + " step") << ", \\\n     '' index " << block
         << " using 1:3 with linespoints dt 2 lw 2 pt 6 ps 1.5 lc " << lc << " title "
         << gp_quote(pair + " exposed comm");
    ++i;
  }
  dat.close();
  const ConfigRow& ref = *slice.front();
  write_gnuplot_script(dir, name,
                       "set title 'Context parallelism cp " + n + ": step time and exposed "
                       "communication (" + ref.value("model") + ", " + label(ref) + ")'\n"
                       "set xlabel 'sequence length (tokens)'\nset logscale x 2\n"
                       "set ylabel 'seconds per step (median)'\nset logscale y\n"
                       "set offsets graph 0.05, graph 0.05, 0, 0\n" +  // points off the frame
                           plot.str() + "\n");
  fig.has_data = true;
  return fig;
}

// Context parallelism's exchange schemes compared: one figure per cp size (cp_schemes_cp2,
// cp_schemes_cp4 ...), or one skipped `cp_schemes` when no run has cp >= 2.
std::vector<Figure> cp_schemes(const std::vector<ConfigRow>& rows, const std::string& dir) {
  std::map<int64_t, std::vector<const ConfigRow*>> by_cp;  // cp ascending
  for (const auto& r : rows)
    if (r.config_int("cp") >= 2) by_cp[r.config_int("cp")].push_back(&r);
  std::vector<Figure> out;
  for (const auto& [cp, cp_rows] : by_cp) out.push_back(cp_schemes_figure(cp, cp_rows, dir));
  if (out.empty()) {
    out.push_back(make_figure("cp_schemes", "Context-parallel schemes", ""));
    out.back().skip_reason = "no run with context parallelism (cp >= 2)";
  }
  return out;
}

}  // namespace

std::vector<Figure> write_figures(const std::vector<ConfigRow>& rows, const std::string& outdir) {
  std::vector<Figure> figures = pareto_figures(rows, outdir);
  for (auto& f : std::vector<Figure>{scaling(rows, outdir),           context(rows, outdir, false),
          context(rows, outdir, true),     context_activation(rows, outdir),
          stacked(rows, outdir, true),
          stacked(rows, outdir, false),    bubble(rows, outdir),
          split_ablation(rows, outdir),    loss_curves(rows, outdir),
          plan_accuracy(rows, outdir),     expert_load(rows, outdir)})
    figures.push_back(std::move(f));
  for (auto& f : cp_schemes(rows, outdir)) figures.push_back(std::move(f));
  return figures;
}

}  // namespace hlp::analysis
