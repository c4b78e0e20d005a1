// Recorder: spans, nesting, comm observer events, tracing switch, thread safety, step metrics.
#include "catch_compat.h"

#include <thread>
#include <vector>

#include "metrics/memory.h"
#include "metrics/recorder.h"
#include "metrics/schema.h"

using hlp::metrics::Lane;
using hlp::metrics::Recorder;
using hlp::metrics::TraceEvent;
namespace schema = hlp::metrics::schema;

TEST_CASE("metrics recorder: a span becomes one event with its lane, step, micro-batch and ordered times",
          "[recorder]") {
  Recorder rec(3);
  const double before = rec.run_time_now();
  {
    auto s = rec.span("forward", Lane::Compute, 7, 2);
  }
  const double after = rec.run_time_now();
  auto events = rec.take_events();
  REQUIRE(events.size() == 1);
  const TraceEvent& e = events[0];
  CHECK(e.name == "forward");
  CHECK(e.category == "compute");  // defaults to the lane name
  CHECK(e.lane == Lane::Compute);
  CHECK(e.step == 7);
  CHECK(e.micro_batch == 2);
  CHECK(e.bytes == 0);
  CHECK(e.start_s >= before);
  CHECK(e.end_s >= e.start_s);
  CHECK(e.end_s <= after);
  CHECK(rec.take_events().empty());  // drained
}

TEST_CASE("metrics recorder: nested spans nest: the inner event lies inside the outer one", "[recorder]") {
  Recorder rec;
  {
    auto step = rec.span("step", Lane::Compute, 1, -1, "step");
    {
      auto fwd = rec.span("forward", Lane::Compute, 1, 0);
      auto layer = rec.span("layer0", Lane::Compute, 1, 0);
    }
    auto bwd = rec.span("backward", Lane::Compute, 1, 0);
    bwd.set_bytes(123);
  }
  auto events = rec.take_events();
  REQUIRE(events.size() == 4);
  // Events are stored when spans end: innermost first.
  CHECK(events[0].name == "layer0");
  CHECK(events[1].name == "forward");
  CHECK(events[2].name == "backward");
  CHECK(events[2].bytes == 123);
  CHECK(events[3].name == "step");
  CHECK(events[3].category == "step");
  const TraceEvent& outer = events[3];
  for (int i = 0; i < 3; ++i) {
    CHECK(events[i].start_s >= outer.start_s);
    CHECK(events[i].end_s <= outer.end_s);
  }
  CHECK(events[0].start_s >= events[1].start_s);
  CHECK(events[0].end_s <= events[1].end_s);
  CHECK(events[2].start_s >= events[1].end_s);  // siblings do not overlap
}

TEST_CASE("metrics recorder: span.end() is idempotent and returns the duration and moved spans record once",
          "[recorder]") {
  Recorder rec;
  auto s = rec.span("data_wait", Lane::Data);
  const double d = s.end();
  CHECK(d >= 0.0);
  CHECK(s.end() == 0.0);
  auto a = rec.span("moved", Lane::Data);
  auto b = std::move(a);
  a.end();  // moved-from: nothing
  b.end();
  auto events = rec.take_events();
  REQUIRE(events.size() == 2);
  CHECK(events[1].name == "moved");
  CHECK(events[1].lane == Lane::Data);
}

TEST_CASE("metrics recorder: spans with run-time names keep their own copy of the name",
          "[recorder]") {
  Recorder rec;
  {
    std::string name = "layer" + std::to_string(3) + ".mixer";
    auto s = rec.span(name, Lane::Compute, 1, 0);
    name = "overwritten";  // the span must not refer to the caller's string
    auto moved = std::move(s);
  }
  auto events = rec.take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].name == "layer3.mixer");
}

TEST_CASE("metrics recorder: with tracing off spans still time themselves but store nothing", "[recorder]") {
  Recorder rec;
  rec.set_tracing(false);
  auto s = rec.span("forward", Lane::Compute, 0);
  CHECK(s.end() >= 0.0);
  rec.add_event("manual", "x", Lane::Compute, 1.0, 2.0);
  CHECK(rec.pending_events() == 0);
  rec.set_tracing(true);
  rec.add_event("manual", "x", Lane::Compute, hlp::now_s(), hlp::now_s());
  CHECK(rec.pending_events() == 1);
}

TEST_CASE("metrics recorder: add_event converts raw clock values to run time", "[recorder]") {
  Recorder rec;
  const double t0 = hlp::now_s();
  rec.add_event("load", "data", Lane::Data, t0, t0 + 0.5, 4, 1, 99);
  auto e = rec.take_events().at(0);
  CHECK(e.end_s - e.start_s == Approx(0.5));
  CHECK(e.start_s == Approx(rec.to_run_time(t0)));
  CHECK(e.step == 4);
  CHECK(e.micro_batch == 1);
  CHECK(e.bytes == 99);
}

TEST_CASE("metrics recorder: comm ops reported through the observer land on the comm lane with bytes and kind",
          "[recorder]") {
  Recorder rec;
  hlp::comm::Observer& obs = rec;
  rec.begin_step(5);
  const double t = hlp::now_s();
  obs.on_comm_op({hlp::comm::OpKind::AllReduce, 4096, t, t + 0.25, 2, -1, true});
  obs.on_comm_op({hlp::comm::OpKind::ReduceScatter, 1024, t + 0.3, t + 0.4, 2, -1, false});
  obs.on_comm_op({hlp::comm::OpKind::Send, 8, t + 0.5, t + 0.6, 2, 1, false});
  auto events = rec.take_events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].name == "all_reduce");
  CHECK(events[1].name == "reduce_scatter");
  CHECK(events[2].name == "send");
  for (const auto& e : events) {
    CHECK(e.lane == Lane::Comm);
    CHECK(e.category == "comm");
    CHECK(e.step == 5);
  }
  CHECK(events[0].bytes == 4096);
  CHECK(events[0].end_s - events[0].start_s == Approx(0.25));
  auto totals = rec.take_comm_totals();
  CHECK(totals.bytes == 4096 + 1024 + 8);
  CHECK(totals.ops == 3);
  CHECK(totals.busy_s == Approx(0.45));
  CHECK(rec.take_comm_totals().bytes == 0);
}

TEST_CASE("metrics recorder: comm totals are counted even with tracing off", "[recorder]") {
  Recorder rec;
  rec.set_tracing(false);
  const double t = hlp::now_s();
  rec.on_comm_op({hlp::comm::OpKind::AllGather, 512, t, t, 4, -1, false});
  CHECK(rec.pending_events() == 0);
  CHECK(rec.take_comm_totals().bytes == 512);
}

TEST_CASE("metrics recorder: spans and observer calls from many threads are all kept intact", "[recorder]") {
  Recorder rec;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&rec, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (t % 2 == 0) {
          auto s = rec.span("work", Lane::Compute, t, i);
        } else {
          const double now = hlp::now_s();
          rec.on_comm_op({hlp::comm::OpKind::Broadcast, i, now, now, 2, -1, true});
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  auto events = rec.take_events();
  REQUIRE(events.size() == kThreads * kPerThread);
  std::vector<int> per_step_compute(kThreads, 0);
  int64_t comm_bytes = 0;
  for (const auto& e : events) {
    if (e.lane == Lane::Compute) {
      REQUIRE(e.name == "work");
      per_step_compute[static_cast<size_t>(e.step)]++;
    } else {
      REQUIRE(e.name == "broadcast");
      comm_bytes += e.bytes;
    }
  }
  CHECK(per_step_compute[0] == kPerThread);
  CHECK(per_step_compute[2] == kPerThread);
  const int64_t per_thread_bytes = int64_t{kPerThread} * (kPerThread - 1) / 2;
  CHECK(comm_bytes == 2 * per_thread_bytes);
  CHECK(rec.take_comm_totals().bytes == 2 * per_thread_bytes);
}

TEST_CASE("metrics recorder: record_step keeps the metrics and stamps step_end_s unless given", "[recorder]") {
  Recorder rec;
  rec.record_step(0, {{schema::kLoss, 2.5}, {schema::kTokens, 1024}});
  rec.record_step(1, {{schema::kLoss, 2.25}, {schema::kStepEnd, 42.0}});
  auto steps = rec.take_steps();
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].step == 0);
  CHECK(steps[0].values.at(schema::kLoss) == 2.5);
  CHECK(steps[0].values.at(schema::kTokens) == 1024);
  CHECK(steps[0].values.count(schema::kStepEnd) == 1);
  CHECK(steps[1].values.at(schema::kStepEnd) == 42.0);
  CHECK(rec.take_steps().empty());
}

TEST_CASE("metrics recorder: throughput helpers keep global and per-device tokens/s apart and state both MFUs",
          "[recorder]") {
  hlp::metrics::StepMetrics m;
  // 8192 tokens in 2 s on 4 devices; 6e6 model FLOPs/token, 4e6 executed; 1e9 FLOP/s each.
  hlp::metrics::fill_throughput_metrics(m, 8192, 2.0, 4, 6e6, 4e6, 1e9);
  CHECK(m.at(schema::kTokensPerS) == Approx(4096));
  CHECK(m.at(schema::kTokensPerSPerDevice) == Approx(1024));
  CHECK(m.at(schema::kMfuModel) == Approx(4096 * 6e6 / 4e9));
  CHECK(m.at(schema::kMfuExecuted) == Approx(4096 * 4e6 / 4e9));
  CHECK(m.at(schema::kMfu) == m.at(schema::kMfuModel));
  CHECK(m.at(schema::kStepTime) == 2.0);

  hlp::metrics::StepMetrics mem;
  hlp::metrics::fill_memory_metrics(mem, {100, 1000, 0}, {300, 100, 200});
  CHECK(mem.at(schema::kActivationBytes) == 400);  // 1000 - (300 + 100 + 200)
  CHECK(mem.at(schema::kPeakBytes) == 1000);
  CHECK(mem.at(schema::kCurrentBytes) == 100);
  hlp::metrics::fill_memory_metrics(mem, {100, 1000, 0}, {300, 100, 200}, 77);
  CHECK(mem.at(schema::kActivationBytes) == 77);
}

TEST_CASE("metrics recorder: the schema lists every contracted step metric exactly once", "[schema]") {
  const char* contract[] = {"loss", "tokens", "step_time_s", "tokens_per_s", "data_wait_s",
                            "forward_s", "backward_s", "optimizer_s", "comm_exposed_s",
                            "comm_bytes", "peak_bytes", "param_bytes", "grad_bytes",
                            "optimizer_bytes", "mfu", "tokens_per_s_per_device", "current_bytes",
                            "activation_bytes", "mfu_model", "mfu_executed", "lr", "grad_norm"};
  for (const char* name : contract) {
    int found = 0;
    for (const char* m : schema::kStepMetrics) found += std::string(m) == name;
    INFO(name);
    CHECK(found == 1);
  }
}
