// The training loop's timed and distributed options: summaries every N
// seconds, startup_delay_steps, Chrome traces, init_fn, remote variables and
// hooks when the global step jumps (test_trainer.cpp has the rest).
#include "trainer_support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

using namespace trainer_test;

TEST_CASE("save_summaries_secs writes summaries at most once every N seconds of wall time",
          "[train][hooks][slim]") {
  TempDir dir("summary_secs");
  auto loss_events = [](const std::string& path) {
    std::vector<io::Event> out;
    for (auto& e : io::read_events(path))
      if (e.summary)
        for (const auto& v : *e.summary)
          if (v.tag == "loss") out.push_back(e);
    return out;
  };
  SECTION("a limit longer than the run: only the first due step writes") {
    Run run(train::TrainerOptions().max_steps(12).save_summaries_secs(3600));
    io::EventWriter events((dir.path / "long").string());
    run.trainer.add_hook(std::make_shared<train::SummaryHook>(events, 1, 1));
    run.go();
    events.flush();
    const auto ls = loss_events(events.path());
    REQUIRE(ls.size() == 1);
    CHECK(ls[0].step == 1);
    std::size_t histos = 0;
    for (const auto& e : io::read_events(events.path()))
      if (e.summary)
        for (const auto& v : *e.summary)
          if (v.is_histogram()) {
            ++histos;
            CHECK(e.step == 1);  // histograms too: only at the first due step
          }
    CHECK(histos > 0);
  }
  SECTION("a short limit: writes are spaced by at least that much, and there are several") {
    const double secs = 0.06;
    Run run(train::TrainerOptions().max_steps(16).save_summaries_secs(secs));
    io::EventWriter events((dir.path / "short").string());
    run.trainer.add_hook(std::make_shared<train::SummaryHook>(events, 1));
    // Each step takes at least 20 ms, so 16 steps span >= 0.32 s: at least
    // three writes 60 ms apart fit.
    run.trainer.add_hook(
        std::make_shared<train::LambdaHook>([](train::TrainerBase&, const train::StepResult&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }));
    run.go();
    events.flush();
    const auto ls = loss_events(events.path());
    INFO(ls.size() << " loss summaries");
    CHECK(ls.size() >= 3);
    for (std::size_t i = 1; i < ls.size(); ++i) {
      CHECK(ls[i].step > ls[i - 1].step);
      // The hook decides and stamps with one reading of the writer's
      // clock: the stamps are spaced exactly as the decisions (a 56.6 ms
      // spacing of stamps taken after the decision failed once under ASan
      // on a loaded 2-core machine).
      CHECK(ls[i].wall_time - ls[i - 1].wall_time >= secs);
    }
  }
  SECTION("without it, every every_n steps") {
    Run run(train::TrainerOptions().max_steps(12));
    io::EventWriter events((dir.path / "steps").string());
    run.trainer.add_hook(std::make_shared<train::SummaryHook>(events, 3));
    run.go();
    events.flush();
    CHECK(loss_events(events.path()).size() == 4);
  }
  CHECK_THROWS_WITH(train::TrainerOptions().save_summaries_secs(-1),
                    "cifarnet: TrainerOptions::save_summaries_secs must be >= 0, got -1");
}

TEST_CASE(
    "startup_delay_steps: every worker but the chief waits for global step N (Slim's, not staggered by k)",
    "[train][slim]") {
  // A fake shared global step: each read advances it by one, as if the
  // other workers took one step between two polls.
  struct FakeGlobalStep {
    std::int64_t value = 0, reads = 0, reads_before_first_step = -1;
  };
  auto run_worker = [](int k, std::int64_t n, std::int64_t max_steps, FakeGlobalStep& g) {
    Run run(train::TrainerOptions()
                .max_steps(max_steps)
                .startup_delay_steps(n)
                .worker_index(k)
                .startup_poll_secs(0)
                .global_step_source([&g] {
                  ++g.reads;
                  return g.value++;
                }));
    run.trainer.add_hook(
        std::make_shared<train::LambdaHook>([&g](train::TrainerBase& t, const train::StepResult&) {
          if (t.global_step() == 1) g.reads_before_first_step = g.reads;
        }));
    run.go();
    return run.trainer.startup_waited_for();
  };
  SECTION("worker 2, N = 3: waits until the global step reads 3, as worker 1 does") {
    FakeGlobalStep g;
    CHECK(run_worker(2, 3, 10, g) == 3);
    CHECK(g.reads == 4);  // read 0, 1, 2, 3
    CHECK(g.reads_before_first_step == 4);
    FakeGlobalStep h;
    CHECK(run_worker(1, 3, 10, h) == 3);
    CHECK(h.reads == 4);
  }
  SECTION("worker 1, N = 5") {
    FakeGlobalStep g;
    CHECK(run_worker(1, 5, 4, g) == 4);  // capped at max_steps, as Slim's min(delay, number_of_steps)
    CHECK(g.reads == 5);
  }
  SECTION("worker 3, N = 5: 5, or max_steps 3 when that is less") {
    FakeGlobalStep g;
    CHECK(run_worker(3, 5, 3, g) == 3);
    FakeGlobalStep h;
    CHECK(run_worker(3, 5, 100, h) == 5);
    CHECK(h.reads == 6);
  }
  SECTION("the chief (worker 0) does not wait nor read the global step") {
    FakeGlobalStep g;
    CHECK(run_worker(0, 15, 4, g) == 0);
    CHECK(g.reads == 0);
  }
  SECTION("a worker with a delay and no global step source is a ConfigError") {
    Run run(train::TrainerOptions().max_steps(2).startup_delay_steps(4).worker_index(1));
    CHECK_THROWS_AS(run.go(), ConfigError);
    CHECK_THROWS_WITH(run.go(),
                      Catch::Contains("startup_delay_steps 4 on worker 1 needs global_step_source"));
    CHECK(run.trainer.global_step() == 0);
  }
  SECTION("under synchronous gradient averaging it is a ConfigError, as Slim's with a sync_optimizer") {
    struct NoSync : GradientSync {
      void begin() override {}
      void ready_from(std::size_t) override {}
      void finish() override {}
    } sync;
    FakeGlobalStep g;
    Run run(train::TrainerOptions().max_steps(2).startup_delay_steps(4).worker_index(1).global_step_source(
        [&g] { return g.value++; }));
    run.trainer.set_gradient_sync(&sync);
    CHECK_THROWS_WITH(run.go(), Catch::Contains("startup_delay_steps must be 0 under synchronous gradient"));
    run.trainer.set_gradient_sync(nullptr);
  }
}

TEST_CASE("trace_every_n_steps writes a Chrome trace of a step's layer ops every N steps",
          "[train][slim][trace]") {
  TempDir dir("trace");
  Run run(train::TrainerOptions().max_steps(7).trace_every_n_steps(3).trace_dir(dir.path.string()));
  run.go();
  // Slim traces the steps that start at a multiple of N (global step 0, 3, 6)
  // and names the file after the global step when it ends.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"tf_trace-1.json", "tf_trace-4.json", "tf_trace-7.json"});
  CHECK(run.trainer.last_trace_path() == (dir.path / "tf_trace-7.json").string());

  // The names of the leaf layers one forward and backward of the model book
  // in a Profiler: every one must be in the trace, forward and backward.
  Profiler prof;
  {
    M net{{3, 6, 6}, DataFormat::NHWC, {}, 3};
    net.set_profiler(&prof);
    Source src;
    const auto& b = src.next();
    Tensor<float> d;
    softmax_cross_entropy(net.forward(b.images), b.labels, &d);
    net.backward(d);
  }
  REQUIRE(prof.entries().size() >= 5);

  std::ifstream in(dir.path / "tf_trace-4.json");
  const nlohmann::json j = nlohmann::json::parse(in);  // throws on a malformed file
  REQUIRE(j.at("traceEvents").is_array());
  std::set<std::string> forward, backward, trainer;
  double step_dur = 0, layer_sum = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M") continue;
    CHECK(e.at("ph") == "X");
    CHECK(e.at("dur").get<double>() >= 0);
    CHECK(e.at("ts").get<double>() >= 0);
    CHECK(e.at("args").at("global_step") == 4);
    const std::string name = e.at("name"), cat = e.at("cat");
    if (cat == "forward") forward.insert(name), layer_sum += e.at("dur").get<double>();
    if (cat == "backward") backward.insert(name), layer_sum += e.at("dur").get<double>();
    if (cat == "trainer") trainer.insert(name);
    if (name == "train_step") step_dur = e.at("dur").get<double>();
  }
  for (const auto& entry : prof.entries()) {
    INFO("layer " << entry.name);
    CHECK(forward.count(entry.name) == 1);
    if (entry.backward_calls) CHECK(backward.count(entry.name) == 1);
  }
  CHECK(forward.size() == prof.entries().size());
  CHECK(forward.count("dense1") == 1);
  for (const char* phase : {"forward", "backward", "softmax_cross_entropy", "regularization",
                            "check_numerics", "optimizer", "update_ops", "train_step"})
    CHECK(trainer.count(phase) == 1);
  CHECK(step_dur > 0);
  CHECK(layer_sum <= step_dur);  // the layers run inside the step

  SECTION("a profiler the model already had gets its own profiler back, and the trace needs a directory") {
    Profiler mine;
    run.net.set_profiler(&mine);
    CHECK_THROWS_WITH(Run(train::TrainerOptions().max_steps(1).trace_every_n_steps(1)).go(),
                      Catch::Contains("trace_every_n_steps needs trace_dir"));
    train::Trainer<M> more(run.net, train::TrainerOptions().max_steps(2).trace_every_n_steps(1).trace_dir(
                                        (dir.path / "more").string()));
    fs::create_directories(dir.path / "more");
    more.set_optimizer(run.opt, [](std::int64_t) { return 0.01; });
    more.run([&]() -> const train::Batch& { return run.src.next(); });
    CHECK(run.net.profiler() == &mine);
    CHECK(mine.entries().empty());  // traced steps are booked in the trace only
    CHECK(fs::exists(dir.path / "more" / "tf_trace-1.json"));
    CHECK(fs::exists(dir.path / "more" / "tf_trace-2.json"));
    run.net.set_profiler(nullptr);
  }
}

TEST_CASE("init_fn runs once after initialization, before the first step, and not on resume",
          "[train][slim]") {
  TempDir dir("init_fn");
  int calls = 0;
  std::int64_t step_seen = -1;
  float first_value = 0;
  auto init = [&](train::TrainerBase& t) {
    ++calls;
    step_seen = t.global_step();
    // A warm start: set every parameter to a known value.
    t.parameters().values().setConstant(0.25f);
  };
  {
    Run run(train::TrainerOptions().max_steps(5).init_fn(init));
    io::CheckpointManager mgr(dir.path.string(), 5);
    run.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 0, 0, nullptr));
    run.trainer.add_hook(
        std::make_shared<train::LambdaHook>([&](train::TrainerBase& t, const train::StepResult&) {
          if (t.global_step() == 1) first_value = t.parameters().values()[0];
        }));
    CHECK_FALSE(run.trainer.restore_latest(mgr));  // nothing to resume
    CHECK(run.go() == 5);
    CHECK(calls == 1);
    CHECK(step_seen == 0);
    CHECK(run.trainer.init_fn_ran());
    // The first step started from the assigned values (one update away).
    CHECK(first_value != 0.25f);
    CHECK(std::abs(first_value - 0.25f) < 0.3f);  // lr 0.05 x a gradient clipped to norm 5
    // A second run() of the same trainer does not call it again.
    CHECK(run.go() == 5);
    CHECK(calls == 1);
  }
  {
    // Resumed from the checkpoint of step 5: not called.
    Run run(train::TrainerOptions().max_steps(8).init_fn(init));
    io::CheckpointManager mgr(dir.path.string(), 5);
    REQUIRE(run.trainer.restore_latest(mgr));
    CHECK(run.go() == 8);
    CHECK(calls == 1);
    CHECK_FALSE(run.trainer.init_fn_ran());
  }
  {
    // Not on a worker other than the chief: it gets the chief's variables.
    Run run(train::TrainerOptions().max_steps(2).worker_index(1).init_fn(init));
    run.trainer.initialize();
    CHECK(run.go() == 2);
    CHECK(calls == 1);
    CHECK_FALSE(run.trainer.init_fn_ran());
  }
  {
    // step() alone (no run()) calls it too, once.
    Run run(train::TrainerOptions().max_steps(3).init_fn(init));
    run.trainer.step(run.src.next());
    run.trainer.step(run.src.next());
    CHECK(calls == 2);
    CHECK(run.trainer.init_fn_ran());
  }
}

namespace {
/// Remote variables in this process: a copy of the parameters updated with
/// momentum on every push, plus `others` updates of other (simulated)
/// workers after each one, which move the global step past several
/// multiples at once.
struct FakeRemote : train::RemoteVariables {
  M vars{{3, 6, 6}, DataFormat::NHWC, {}, 3};
  optim::Momentum<float> opt{vars.parameters(), optim::MomentumOptions().momentum(0.9)};
  Parameters<float>* local;
  std::int64_t step = 0, others = 0, pulls = 0, pushes = 0;
  explicit FakeRemote(Parameters<float>& p) : local(&p) {}
  std::int64_t pull() override {
    ++pulls;
    local->values() = vars.parameters().values();
    local->state() = vars.parameters().state();
    return step;
  }
  std::int64_t push(double lr) override {
    ++pushes;
    vars.parameters().grads() = local->grads();
    opt.step(vars.parameters(), lr);
    step += 1 + others;
    return step;
  }
  void current_state(cifarnet::StateDict& d) override {
    cifarnet::StateDict mine;
    io::add_parameters(mine, vars.parameters());
    io::add_state(mine, opt);
    for (const auto& [name, t] : mine) d.set(name, t);
    io::set_global_step(d, step);
    io::LoadOptions whole_state;  // `d` holds the slots and global_step too
    whole_state.ignore_unexpected = true;
    io::load_parameters(*local, d, whole_state);
  }
};
}  // namespace

TEST_CASE("With remote variables a step pulls, pushes instead of updating, and takes the remote global step",
          "[train][remote]") {
  // One worker, nothing else: the same run as a local one (the update runs
  // on the remote copy, with the same arithmetic).
  M net{{3, 6, 6}, DataFormat::NHWC, {}, 7};  // other initial values: the pull replaces them
  optim::Chain<optim::Momentum> opt(net.parameters(), optim::MomentumOptions().momentum(0.9));
  FakeRemote remote(net.parameters());  // its variables start as the reference's (seed 3)
  train::Trainer<M> t(net, train::TrainerOptions().max_steps(6));
  t.set_optimizer(opt, optim::piecewise_constant({6, 14}, {0.05, 0.005, 0.0005}));
  t.set_remote_variables(&remote);
  Source src;
  t.run([&]() -> const train::Batch& { return src.next(); });
  CHECK(t.global_step() == 6);
  CHECK(remote.pushes == 6);
  CHECK(remote.pulls == 6);
  M ref{{3, 6, 6}, DataFormat::NHWC, {}, 3};
  optim::Chain<optim::Momentum> ref_opt(ref.parameters(), optim::MomentumOptions().momentum(0.9));
  train::Trainer<M> rt(ref, train::TrainerOptions().max_steps(6));
  rt.set_optimizer(ref_opt, optim::piecewise_constant({6, 14}, {0.05, 0.005, 0.0005}));
  Source rsrc;
  rt.run([&]() -> const train::Batch& { return rsrc.next(); });
  bool same = true;
  for (Eigen::Index i = 0; i < ref.parameters().values().size(); ++i)
    same = same && ref.parameters().values()[i] == remote.vars.parameters().values()[i];
  CHECK(same);
  // The checkpoint holds the remote state (values, slots, step) and the
  // local model takes it.
  const cifarnet::StateDict d = t.state_dict();
  CHECK(io::global_step(d) == 6);
  bool local_now = true;
  for (Eigen::Index i = 0; i < net.parameters().values().size(); ++i)
    local_now = local_now && net.parameters().values()[i] == remote.vars.parameters().values()[i];
  CHECK(local_now);
}

TEST_CASE(
    "Hooks every N steps fire once past each multiple when the global step jumps (asynchronous workers)",
    "[train][remote][hooks]") {
  train::detail::EveryNSteps every(10);
  every.reset(0);
  std::vector<std::int64_t> fired;
  for (std::int64_t s : {3, 7, 9, 12, 15, 20, 21, 29, 33, 40, 41})
    if (every.due(s)) fired.push_back(s);
  CHECK(fired == std::vector<std::int64_t>{12, 20, 33, 40});
  train::detail::EveryNSteps one_by_one(4);
  one_by_one.reset(0);
  fired.clear();
  for (std::int64_t s = 1; s <= 12; ++s)
    if (one_by_one.due(s)) fired.push_back(s);
  CHECK(fired == std::vector<std::int64_t>{4, 8, 12});
  CHECK_FALSE(train::detail::EveryNSteps(0).due(0));

  // A trainer whose global step advances by 3 per step (two other workers):
  // the logging hook still logs at the first step and past each 10.
  M net{{3, 6, 6}, DataFormat::NHWC, {}, 3};
  optim::Chain<optim::Momentum> opt(net.parameters(), optim::MomentumOptions().momentum(0.9));
  FakeRemote remote(net.parameters());
  remote.others = 2;
  train::Trainer<M> t(net, train::TrainerOptions().max_steps(31));
  t.set_optimizer(opt, [](std::int64_t) { return 0.01; });
  t.set_remote_variables(&remote);
  std::ostringstream log;
  t.add_hook(std::make_shared<train::LoggingHook>(10, log));
  Source src;
  t.run([&]() -> const train::Batch& { return src.next(); });
  CHECK(t.global_step() == 33);  // 11 pushes of 3: stops at the first step >= 31
  CHECK(remote.pushes == 11);
  std::vector<std::string> steps;
  std::istringstream lines(log.str());
  for (std::string line; std::getline(lines, line);) steps.push_back(line.substr(0, line.find(',')));
  CHECK(steps == std::vector<std::string>{"step = 3", "step = 12", "step = 21", "step = 30"});
}

TEST_CASE("SlimLogHook writes Slim's 'global step N: loss = L (S sec/step)' every step by default",
          "[train][hooks][slim]") {
  std::ostringstream every, third;
  Run run(7);
  std::vector<train::StepResult> results;
  run.trainer.add_hook(std::make_shared<train::SlimLogHook>(1, every));
  run.trainer.add_hook(std::make_shared<train::SlimLogHook>(3, third));
  run.trainer.add_hook(std::make_shared<train::LambdaHook>(
      [&](train::TrainerBase&, const train::StepResult& r) { results.push_back(r); }));
  run.go();
  REQUIRE(results.size() == 7);
  std::string want_every, want_third;
  for (const auto& r : results) {
    char line[160];
    std::snprintf(line, sizeof line, "global step %lld: loss = %.4f (%.3f sec/step)\n",
                  static_cast<long long>(r.step), r.total_loss, r.seconds);
    want_every += line;
    if (r.step % 3 == 0) want_third += line;
  }
  CHECK(every.str() == want_every);
  CHECK(third.str() == want_third);
  CHECK_THAT(every.str(), Catch::StartsWith("global step 1: loss = "));
  CHECK_THROWS_WITH(train::SlimLogHook(-1), Catch::Contains("log_every_n_steps must be >= 0, got -1"));
}

TEST_CASE("max_steps unset (Slim's number_of_steps=None) trains until the input ends, then stops cleanly",
          "[train][slim]") {
  CHECK_FALSE(train::TrainerOptions().has_max_steps());
  CHECK(train::TrainerOptions().max_steps(5).has_max_steps());
  TempDir dir("until_input_ends");
  // A stream of 9 batches, then its end.
  struct Finite : data::BatchStream {
    Source* src;
    int left = 9;
    bool next(train::Batch& out) override {
      if (left == 0) return false;
      --left;
      out = src->next();
      return true;
    }
    data::PipelinePosition position() const override { return {}; }
    void restore(const data::PipelinePosition&) override {}
    void reseed(std::uint64_t) override {}
  };
  SECTION("a stream that ends: 9 steps, the hooks' end() (a last checkpoint at step 9)") {
    Run run{train::TrainerOptions()};
    Finite s;
    s.src = &run.src;
    io::CheckpointManager mgr(dir.path.string(), 5);
    run.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 0, 0, nullptr));
    CHECK(run.trainer.run(s) == 9);
    CHECK(run.trainer.input_ended());
    REQUIRE(mgr.latest());
    CHECK(*io::global_step(mgr.restore_latest()->dict) == 9);
  }
  SECTION("a batch function: an empty batch is the end of the input") {
    Run run{train::TrainerOptions()};
    train::Batch empty;
    int calls = 0;
    CHECK(run.trainer.run([&]() -> const train::Batch& { return ++calls <= 4 ? run.src.next() : empty; }) ==
          4);
    CHECK(run.trainer.input_ended());
  }
  SECTION("with max_steps set, a stream that ends first is still an error") {
    Run run(20);
    Finite s;
    s.src = &run.src;
    CHECK_THROWS_WITH(run.trainer.run(s),
                      Catch::Contains("batch stream ended at global step 9, before max_steps 20"));
  }
  SECTION("with max_steps set and reached first, the input has not ended") {
    Run run(5);
    Finite s;
    s.src = &run.src;
    CHECK(run.trainer.run(s) == 5);
    CHECK_FALSE(run.trainer.input_ended());
  }
}
