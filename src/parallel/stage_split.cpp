#include "parallel/stage_split.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>
#include <sstream>

#include "common/error.h"
#include "model/accounting.h"

namespace hlp::parallel {

double max_over_mean(const std::vector<double>& values) {
  if (values.empty()) return 1.0;
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  return mean > 0 ? *std::max_element(values.begin(), values.end()) / mean : 1.0;
}

double StageSplit::max_over_mean_cost() const { return max_over_mean(stage_cost); }

std::vector<double> stage_sums(const std::vector<double>& w, const std::vector<int64_t>& first) {
  const int64_t L = int64_t(w.size()) - 2;
  const size_t p = first.size();
  std::vector<double> out(p, 0.0);
  for (size_t s = 0; s < p; ++s) {
    const int64_t end = s + 1 < p ? first[s + 1] : L;
    for (int64_t b = first[s]; b < end; ++b) out[s] += w[size_t(b + 1)];
  }
  out.front() += w.front();  // embedding
  out.back() += w.back();    // final norm + head
  return out;
}

std::vector<int64_t> min_max_split(const std::vector<double>& w, int p) {
  const int64_t L = int64_t(w.size()) - 2;
  // prefix[b] = cost of blocks [0, b)
  std::vector<double> prefix(size_t(L + 1), 0.0);
  for (int64_t b = 0; b < L; ++b) prefix[size_t(b + 1)] = prefix[size_t(b)] + w[size_t(b + 1)];
  auto cost = [&](int64_t begin, int64_t end, int s) {
    double c = prefix[size_t(end)] - prefix[size_t(begin)];
    if (s == 0) c += w.front();
    if (s == p - 1) c += w.back();
    return c;
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][e]: smallest max stage cost placing blocks [0, e) on stages 0..s (each non-empty);
  // from[s][e]: first block of stage s in that placement.
  std::vector<std::vector<double>> best(size_t(p), std::vector<double>(size_t(L + 1), inf));
  std::vector<std::vector<int64_t>> from(size_t(p), std::vector<int64_t>(size_t(L + 1), 0));
  for (int64_t e = 1; e <= L; ++e) best[0][size_t(e)] = cost(0, e, 0);
  for (int s = 1; s < p; ++s)
    for (int64_t e = s + 1; e <= L; ++e)
      for (int64_t b = s; b < e; ++b) {
        const double c = std::max(best[size_t(s - 1)][size_t(b)], cost(b, e, s));
        if (c < best[size_t(s)][size_t(e)]) {  // strict: ties keep the earliest boundary
          best[size_t(s)][size_t(e)] = c;
          from[size_t(s)][size_t(e)] = b;
        }
      }
  std::vector<int64_t> first(size_t(p), 0);
  int64_t e = L;
  for (int s = p - 1; s > 0; --s) {
    first[size_t(s)] = from[size_t(s)][size_t(e)];
    e = first[size_t(s)];
  }
  return first;
}

namespace {

std::vector<int64_t> parse_explicit(const std::string& list, int p, int64_t L) {
  std::vector<int64_t> first;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw user_error("--pp-split '", list, "': '", item, "' is not a layer index; give "
                       "uniform, params, balanced or the first layer of each stage, e.g. 0,2");
    first.push_back(v);
  }
  if (int(first.size()) != p)
    throw user_error("--pp-split '", list, "' lists ", first.size(), " stages but --pp is ", p,
                     "; give one first layer per stage");
  if (first.front() != 0)
    throw user_error("--pp-split '", list, "': the first stage must start at layer 0");
  for (size_t s = 1; s < first.size(); ++s) {
    if (first[s] <= first[s - 1])
      throw user_error("--pp-split '", list, "' leaves stage ", s - 1, " empty; first layers "
                       "must be strictly increasing");
    if (first[s] >= L)
      throw user_error("--pp-split '", list, "': stage ", s, " starts at layer ", first[s],
                       " but the model has only ", L, " layers (0..", L - 1, ")");
  }
  return first;
}

}  // namespace

StageSplit split_stages(const model::ModelConfig& config, const model::LoraConfig& lora,
                        int64_t seq_len, int p, const std::string& method) {
  const int64_t L = config.num_layers();
  if (p < 1) throw user_error("--pp must be >= 1 (got ", p, ")");
  if (p > L)
    throw user_error("--pp ", p, " asks for more pipeline stages than the model has layers (",
                     L, "); use --pp <= ", L);
  const std::vector<double> costs = model::layer_costs(config, lora, seq_len);
  StageSplit split;
  split.method = method;
  if (method == "uniform") {
    int64_t b = 0;
    for (int s = 0; s < p; ++s) {
      split.first_block.push_back(b);
      b += L / p + (s < L % p ? 1 : 0);
    }
  } else if (method == "params") {
    const auto counts = model::count_parameters(config, lora);
    std::vector<double> w(counts.per_layer_trainable.begin(), counts.per_layer_trainable.end());
    split.first_block = min_max_split(w, p);
  } else if (method == "balanced" || method == "profiled") {  // profiled: pipeline_profile.h
    split.first_block = min_max_split(costs, p);
  } else if (!method.empty() && (std::isdigit(static_cast<unsigned char>(method[0])) ||
                                 method.find(',') != std::string::npos)) {
    split.first_block = parse_explicit(method, p, L);
  } else {
    throw user_error("--pp-split: unknown value '", method, "'; choose uniform, params, "
                     "balanced, profiled or a list of first layers such as 0,2");
  }
  for (int s = 0; s < p; ++s)
    split.end_block.push_back(s + 1 < p ? split.first_block[size_t(s + 1)] : L);
  split.stage_cost = stage_sums(costs, split.first_block);
  return split;
}

StageSplit split_on_costs(const std::vector<double>& costs, int p, const std::string& method) {
  const int64_t L = int64_t(costs.size()) - 2;
  if (p < 1 || p > L)
    throw user_error("--pp ", p, " asks for more pipeline stages than the model has layers (",
                     L, "); use --pp <= ", L);
  StageSplit split;
  split.method = method;
  split.first_block = min_max_split(costs, p);
  for (int s = 0; s < p; ++s)
    split.end_block.push_back(s + 1 < p ? split.first_block[size_t(s + 1)] : L);
  split.stage_cost = stage_sums(costs, split.first_block);
  return split;
}

}  // namespace hlp::parallel
