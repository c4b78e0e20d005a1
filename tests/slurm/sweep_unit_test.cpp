// hlp-sweep's pure parts: exclude rules, job-file parsing, expansion and naming, templates, cost,
// launcher lines.
#include "catch_compat.h"
#include <cmath>
#include <map>
#include <sstream>

#include "common/error.h"
#include "cost.h"
#include "exclude_rule.h"
#include "job_file.h"
#include "render.h"
#include "site.h"
#include "sweep.h"

using namespace hlp::sweep;

namespace {
OptionLookup lookup_of(const std::map<std::string, std::string>& values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}
const std::set<std::string> kNames = {"strategy", "ranks", "tp", "pp", "seq-len", "micro-batches"};

JobFile parse(const std::string& text) {
  std::istringstream in(text);
  return parse_job_file(in, "test.ini");
}
}  // namespace

TEST_CASE("exclude rule: value match, alternatives and negation", "[slurm]") {
  ExcludeRule rule("strategy=single & ranks!=1", kNames);
  CHECK(rule.matches(lookup_of({{"strategy", "single"}, {"ranks", "2"}})));
  CHECK_FALSE(rule.matches(lookup_of({{"strategy", "single"}, {"ranks", "1"}})));
  CHECK_FALSE(rule.matches(lookup_of({{"strategy", "ddp"}, {"ranks", "2"}})));
  ExcludeRule any("strategy = pp|tp", kNames);
  CHECK(any.matches(lookup_of({{"strategy", "tp"}})));
  CHECK_FALSE(any.matches(lookup_of({{"strategy", "fsdp"}})));
  // On the right of '=', 'pp' is the value, not the option pp.
  ExcludeRule word("strategy=pp", kNames);
  CHECK(word.matches(lookup_of({{"strategy", "pp"}, {"pp", "2"}})));
}

TEST_CASE("exclude rule: arithmetic over option names", "[slurm]") {
  ExcludeRule rule("tp*pp > ranks", kNames);
  CHECK(rule.matches(lookup_of({{"tp", "2"}, {"pp", "2"}, {"ranks", "2"}})));
  CHECK_FALSE(rule.matches(lookup_of({{"tp", "2"}, {"pp", "2"}, {"ranks", "4"}})));
  ExcludeRule mod("ranks % (tp*pp) != 0", kNames);
  CHECK(mod.matches(lookup_of({{"tp", "2"}, {"pp", "1"}, {"ranks", "3"}})));
  CHECK_FALSE(mod.matches(lookup_of({{"tp", "2"}, {"pp", "1"}, {"ranks", "4"}})));
  ExcludeRule dashed("seq-len >= 4096 & micro-batches - 1 < 2", kNames);
  CHECK(dashed.matches(lookup_of({{"seq-len", "8192"}, {"micro-batches", "2"}})));
  CHECK_FALSE(dashed.matches(lookup_of({{"seq-len", "8192"}, {"micro-batches", "4"}})));
  ExcludeRule right("ranks != tp*pp", kNames);  // arithmetic on the right: not a value list
  CHECK(right.matches(lookup_of({{"tp", "2"}, {"pp", "1"}, {"ranks", "4"}})));
  CHECK_FALSE(right.matches(lookup_of({{"tp", "2"}, {"pp", "2"}, {"ranks", "4"}})));
}

TEST_CASE("exclude rule: mistakes are user errors naming the rule", "[slurm]") {
  CHECK_THROWS_WITH(ExcludeRule("stratgy=ddp", kNames), Catch::Contains("'stratgy' is not an option"));
  CHECK_THROWS_WITH(ExcludeRule("tp*pp", kNames), Catch::Contains("has no comparison"));
  CHECK_THROWS_WITH(ExcludeRule("ranks > (tp", kNames), Catch::Contains("missing ')'"));
  CHECK_THROWS_WITH(ExcludeRule("ranks ! 2", kNames), Catch::Contains("'!' must be followed by '='"));
  CHECK_THROWS_WITH(ExcludeRule("ranks=1 & ", kNames), Catch::Contains("empty clause"));
  CHECK_THROWS_AS(ExcludeRule("ranks / 0 > 1", kNames), hlp::UserError);
}

TEST_CASE("job file: sections, quoted list items, site overrides", "[slurm]") {
  JobFile job = parse(
      "name = demo\n[job]\ntime = 00:05:00\nsetup = module load a\nsetup = module load b\n"
      "[psc-bridges2]\ntime = 02:00:00\n[fixed]\nmodel = tiny\n"
      "[sweep]\nstrategy = ddp, pp\npp-split = uniform, \"0,4\"\nranks = 2\n");
  CHECK(job.setting("local", "time") == "00:05:00");
  CHECK(job.setting("psc-bridges2", "time") == "02:00:00");
  CHECK(job.setting("local", "name") == "demo");
  CHECK(job.setting_list("local", "setup").size() == 2);
  REQUIRE(job.axes.size() == 3);
  CHECK(job.axes[1].values == std::vector<std::string>{"uniform", "0,4"});
  REQUIRE(job.fixed.size() == 1);
  CHECK(job.fixed[0].key == "model");
}

TEST_CASE("job file: unknown names are errors that list the valid ones", "[slurm]") {
  CHECK_THROWS_WITH(parse("[sweep]\nseq-length = 1, 2\n"),
                    Catch::Contains("unknown axis 'seq-length'") && Catch::Contains("seq-len"));
  CHECK_THROWS_WITH(parse("[job]\nwalltime = 1\n"), Catch::Contains("unknown setting 'walltime'"));
  CHECK_THROWS_WITH(parse("[swep]\nranks = 1\n"), Catch::Contains("unknown section [swep]"));
  CHECK_THROWS_WITH(parse("[fixed]\nsteps = many\n"), Catch::Contains("not a non-negative integer"));
  CHECK_THROWS_WITH(parse("[sweep]\nranks = 1, 1\n"), Catch::Contains("lists a value twice"));
  CHECK_THROWS_WITH(parse("[fixed]\nranks = 2\n[sweep]\nranks = 1, 2\n"), Catch::Contains("both fixed and swept"));
  CHECK_THROWS_WITH(parse("[sweep]\nranks = 1,,2\n"), Catch::Contains("empty value"));
  CHECK_THROWS_WITH(parse("[fixed]\nexclude = ranks=1\n"), Catch::Contains("exclude rules belong in [sweep]"));
  // train-options declares an option this hlp-sweep does not know yet.
  CHECK_NOTHROW(parse("[job]\ntrain-options = new-knob\n[fixed]\nstrategy = ddp\n[sweep]\nnew-knob = a, b\n"));
}

TEST_CASE("expansion: cartesian product in file order, excludes, names, shapes", "[slurm]") {
  JobFile job = parse(
      "name = s\n[fixed]\nmodel = tiny\n[sweep]\nstrategy = single, ddp, fsdp2\nranks = 1, 2, 4\n"
      "tp = 1, 2\nseq-len = 128, 256\n"
      "exclude = strategy=single & ranks!=1\nexclude = strategy=single & tp!=1\n"
      "exclude = strategy!=single & ranks=1\nexclude = ranks % (tp*pp) != 0\n");
  Sweep sweep = expand_sweep(job);
  // single: 1 rank x tp1 x 2 seq = 2; ddp/fsdp2: ranks 2 (tp 1,2), 4 (tp 1,2) x 2 seq = 8 each.
  REQUIRE(sweep.configs.size() == 18);
  CHECK(sweep.excluded == 3 * 3 * 2 * 2 - 18);
  CHECK(sweep.configs[0].name == "single-n1-t128");
  CHECK(sweep.configs[1].name == "single-n1-t256");
  CHECK(sweep.configs[2].name == "ddp-n2-t128");
  CHECK(sweep.configs[4].name == "ddp+tp2-n2-t128");
  CHECK(sweep.configs[4].label == "ddp+tp2 n=2 seq-len=128");
  CHECK(sweep.configs[4].value("tp") == "2");
  CHECK(sweep.configs[4].value("model") == "tiny");
  REQUIRE(sweep.shapes.size() == 3);
  CHECK(sweep.shapes[0].name == "s-n1");
  CHECK(sweep.shapes[0].config_indices.size() == 2);
  CHECK(sweep.shapes[1].ranks == 2);
  CHECK(sweep.shapes[1].config_indices.size() == 8);
  CHECK(sweep.shapes[2].config_indices.size() == 8);
  // ranks is the world size, not an hlp-train option: never written into the per-task INI.
  std::string ini = config_ini(sweep, sweep.configs[4], "x.ini");
  CHECK(ini.find("strategy = ddp\n") != std::string::npos);
  CHECK(ini.find("tp = 2\n") != std::string::npos);
  CHECK(ini.find("\nranks") == std::string::npos);
}

TEST_CASE("expansion: an impossible configuration that no rule removes is an error naming it", "[slurm]") {
  JobFile job = parse("[sweep]\nstrategy = ddp\ntp = 2\nranks = 2, 3\n");
  CHECK_THROWS_WITH(expand_sweep(job), Catch::Contains("configuration 'ddp+tp2-n3' is impossible") &&
                                           Catch::Contains("exclude = ranks % (tp*pp*cp) != 0"));
  JobFile single = parse("[sweep]\nstrategy = single\nranks = 2\n");
  CHECK_THROWS_WITH(expand_sweep(single), Catch::Contains("'single-n2' is impossible"));
  JobFile no_strategy = parse("[fixed]\nmodel = tiny\n");
  CHECK_THROWS_WITH(expand_sweep(no_strategy), Catch::Contains("no strategy"));
}

TEST_CASE("templates: every placeholder filled, unknown ones are errors", "[slurm]") {
  CHECK(fill_template("a {{x}} b {{y}}{{x}}", {{"x", "1"}, {"y", "2"}}, "t") == "a 1 b 21");
  CHECK_THROWS_WITH(fill_template("{{nope}}", {{"x", "1"}}, "t.sbatch"),
                    Catch::Contains("t.sbatch: unknown placeholder {{nope}}"));
  CHECK(shell_quote("/a/b-c_1.h5") == "/a/b-c_1.h5");
  CHECK(shell_quote("/a b/it's") == "'/a b/it'\\''s'");
}

TEST_CASE("cost: Slurm time limits in every sbatch --time form", "[slurm]") {
  CHECK(slurm_time_limit_s("90", "t") == 90 * 60);
  CHECK(slurm_time_limit_s("05:30", "t") == 5 * 60 + 30);
  CHECK(slurm_time_limit_s("01:00:00", "t") == 3600);
  CHECK(slurm_time_limit_s("2-12", "t") == (2 * 24 + 12) * 3600);
  CHECK(slurm_time_limit_s("1-00:30", "t") == 24 * 3600 + 30 * 60);
  CHECK(slurm_time_limit_s("1-02:03:04", "t") == ((24 + 2) * 60 + 3) * 60 + 4);
  CHECK(std::isinf(slurm_time_limit_s("UNLIMITED", "t")));
  CHECK(std::isinf(slurm_time_limit_s("0", "t")));  // sbatch: 0 = no limit
  for (const char* bad : {"1h", "", "1:2:3:4", "-5", "1-", "a-01:00"})
    CHECK_THROWS_WITH(slurm_time_limit_s(bad, "x.ini"), Catch::Contains("is not a Slurm time limit"));
}

TEST_CASE("cost: rates by site and GPU type, a job file's rate wins, CPU ranks have none", "[slurm]") {
  auto rate = [](Site site, const std::string& text) { return charge_rate(site, parse(text)); };
  const std::string body = "[fixed]\nmodel = tiny\n[sweep]\nstrategy = ddp\nranks = 2\n";
  // the rates slurm/README.md cites: V100 1, H100 2 SUs per GPU-hour
  CHECK(rate(Site::psc_bridges2, body)->su_per_gpu_hour == 1);  // default gpu-type v100-32
  CHECK(rate(Site::psc_bridges2, "[psc-bridges2]\ngpu-type = v100-16\n" + body)->su_per_gpu_hour == 1);
  CHECK(rate(Site::psc_bridges2, "[psc-bridges2]\ngpu-type = h100-80\n" + body)->su_per_gpu_hour == 2);
  const auto set = rate(Site::psc_bridges2, "[psc-bridges2]\ngpu-type = h100-80\nsu-per-gpu-hour = 1.5\n" + body);
  CHECK(set->su_per_gpu_hour == 1.5);
  CHECK(set->source == "job file su-per-gpu-hour");
  CHECK(set->text() == "1.5");
  CHECK_FALSE(rate(Site::generic, body));                          // no rate: marked, not invented
  CHECK(rate(Site::generic, "[job]\nsu-per-gpu-hour = 3\n" + body)->su_per_gpu_hour == 3);
  CHECK_FALSE(rate(Site::generic, "[generic]\ngpus-per-task = 0\nsu-per-gpu-hour = 3\n" + body));
  CHECK_FALSE(rate(Site::local, "[job]\nsu-per-gpu-hour = 3\n" + body));  // CPU ranks
  CHECK_THROWS_WITH(rate(Site::generic, "[generic]\nsu-per-gpu-hour = -1\n" + body),
                    Catch::Contains("'su-per-gpu-hour = -1' must be a number >= 0"));
}

TEST_CASE("cost: steps x step time + start-up per GPU, totals, worst case, not costed listed", "[slurm]") {
  JobFile job = parse(
      "name = c\n[job]\ntime = 00:30:00\nstartup-s = 60\n[psc-bridges2]\ngpu-type = h100-80\n"
      "[fixed]\nmodel = tiny\nsteps = 100\n[sweep]\nstrategy = ddp\nranks = 2, 4\nseq-len = 128, 256\n");
  Sweep sweep = expand_sweep(job);
  StepTimes times;
  times.step_s = {{"ddp-n2-t128", 1.5}, {"ddp-n4-t128", 20.0}};
  times.missing_why = {{"ddp-n2-t256", "hlp-plan gave no row"}};
  times.default_missing_why = "--no-plan";
  const SweepCost cost = estimate_cost(Site::psc_bridges2, job, sweep, times, "h100-80");
  REQUIRE(cost.costed.size() == 2);
  CHECK(cost.costed[0].devices == 2);
  CHECK(cost.costed[0].hours == Approx(2 * (100 * 1.5 + 60) / 3600.0));
  CHECK_FALSE(cost.costed[0].over_time_limit);
  CHECK(cost.costed[1].hours == Approx(4 * (100 * 20.0 + 60) / 3600.0));
  CHECK(cost.costed[1].over_time_limit);  // 2060 s > 30 min
  CHECK(cost.predicted_hours == Approx(cost.costed[0].hours + cost.costed[1].hours));
  REQUIRE(cost.not_costed.size() == 2);
  CHECK(cost.not_costed[0].first == "hlp-plan gave no row");
  CHECK(cost.not_costed[1].second == std::vector<std::string>{"ddp-n4-t256"});
  REQUIRE(cost.arrays.size() == 2);
  CHECK(cost.arrays[1].script == "c-n4.sbatch");
  CHECK(cost.worst_hours == Approx(2 * 2 * 0.5 + 2 * 4 * 0.5));
  const std::vector<std::string> lines = cost_lines(cost);
  CHECK(lines[0] == "cost of sweep 'c' on h100-80 GPUs at 2 SU/GPU-hour (PSC Bridges-2 User Guide's rate for h100-80 as transcribed, check it; slurm/README.md)");
  CHECK(lines[2] == "  cost ddp-n2-t128: 2 GPU(s) x (100 steps x 1.5 s + 60 s) = 0.1167 GPU-hours = 0.2333 SUs");
  CHECK(lines.back() == "  worst case: 6.0000 GPU-hours = 12.0000 SUs (every task runs to its time limit)");
  // local: rank-hours, no SUs anywhere
  const SweepCost local = estimate_cost(Site::local, job, sweep, times, "");
  CHECK_FALSE(local.gpu);
  const std::vector<std::string> local_lines = cost_lines(local);
  CHECK(local_lines[0] == "cost of sweep 'c' in rank-hours (CPU ranks: no SUs)");
  for (size_t i = 1; i < local_lines.size(); ++i) CHECK(local_lines[i].find("SU") == std::string::npos);
}

TEST_CASE("launcher: each site's default, srun's PMI plugin per MPI, mpirun, the build's mpiexec", "[slurm]") {
  auto line = [](Site site, const std::string& text) { return launcher_line(site, parse(text)); };
  const std::string body = "[fixed]\nmodel = tiny\n[sweep]\nstrategy = ddp\nranks = 2\n";
  // Bridges-2: Open MPI's mpirun inside the allocation (slurm/README.md cites PSC's guide).
  CHECK(line(Site::psc_bridges2, body) == "mpirun -np \"$SLURM_NTASKS\"");
  CHECK(line(Site::generic, body) == "srun --mpi=pmi2");
  // The local Slurm runs this build's MPI: MPICH speaks PMI-2, Debian's Open MPI only PMIx.
  CHECK(line(Site::local, body) == std::string("srun --mpi=") + HLP_SWEEP_LOCAL_SRUN_MPI);
  CHECK(line(Site::local, "[local]\nsrun-mpi = pmix\n" + body) == "srun --mpi=pmix");
  CHECK(line(Site::psc_bridges2, "[psc-bridges2]\nlauncher = srun\nsrun-mpi = pmix\n" + body) ==
        "srun --mpi=pmix");
  CHECK(line(Site::generic, "[generic]\nlauncher = mpiexec\n" + body) == "mpiexec -n \"$SLURM_NTASKS\"");
  // locally not whichever mpiexec Debian's alternatives pick, but the build's own
  CHECK(line(Site::local, "[local]\nlauncher = mpiexec\n" + body) ==
        std::string("'") + HLP_SWEEP_LOCAL_MPIEXEC + "' -n \"$SLURM_NTASKS\"");
  CHECK_THROWS_WITH(parse("[job]\nlauncher = aprun\n" + body),
                    Catch::Contains("'launcher = aprun' must be srun, mpirun or mpiexec"));
  CHECK_THROWS_WITH(line(Site::generic, "[generic]\nlauncher = aprun\n" + body),
                    Catch::Contains("must be srun, mpirun or mpiexec"));
}
