// The training loop: exact resume through a checkpoint, NaN abort keeping
// the last good checkpoint, hooks (logging, checkpoints, summaries), eval.
#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

using namespace cifarnet;
namespace fs = std::filesystem;

namespace {
using Net = Sequential<resnet::ConvBN<3, 4>, ReLU, resnet::BlockV1<4, 8, 2>, GlobalAvgPool, Dense<8, 5>>;
using M = Model<Net, backend::Reference>;
using Opt = optim::Chain<optim::WeightDecay, optim::ClipByGlobalNorm, optim::Momentum>;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("cifarnet_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

/// Synthetic batches drawn from an Rng whose state is checkpointed.
struct Source {
  Rng rng{5};
  train::Batch batch;
  int calls = 0, poison_at = -1;  ///< a NaN pixel in batch `poison_at` (corrupt data)
  const train::Batch& next() {
    batch.images = make_tensor<float>({8, 3, 6, 6}, DataFormat::NHWC);
    for (auto& v : batch.images) v = float(rng.uniform(0, 255));
    if (calls++ == poison_at) batch.images(3, 2, 2, 1) = std::numeric_limits<float>::quiet_NaN();
    batch.labels.resize(8);
    for (auto& l : batch.labels) l = std::int32_t(rng.uniform_int(5));
    return batch;
  }
};

/// One complete run: model, optimizer (clip + momentum), piecewise LR, EMA.
struct Run {
  double wd;
  M net{{3, 6, 6}, DataFormat::NHWC, {}, 3};
  Opt opt{net.parameters(), optim::WeightDecayOptions(wd), optim::ClipByGlobalNormOptions(5.0),
          optim::MomentumOptions().momentum(0.9)};
  optim::ExponentialMovingAverage<float> ema{net.parameters(), optim::ExponentialMovingAverageOptions(0.99)};
  Source src;
  train::Trainer<M> trainer;
  explicit Run(std::int64_t max_steps, double lr0 = 0.05, double weight_decay = 1e-3)
      : Run(train::TrainerOptions().max_steps(max_steps), lr0, weight_decay) {}
  explicit Run(train::TrainerOptions options, double lr0 = 0.05, double weight_decay = 1e-3)
      : wd(weight_decay), trainer(net, std::move(options)) {
    trainer.set_optimizer(opt, optim::piecewise_constant({6, 14}, {lr0, lr0 / 10, lr0 / 100}));
    trainer.add_update([this](Parameters<float>& p, std::int64_t step) { ema.apply(p, step); });
    trainer.add_state_slots(ema);
    trainer.add_rng("data", src.rng);
  }
  std::int64_t go() {
    return trainer.run([this]() -> const train::Batch& { return src.next(); });
  }
};
}  // namespace

TEST_CASE("Training N steps equals N/2 steps, a checkpoint, a fresh process and N/2 more, bit for bit",
          "[train][resume]") {
  TempDir dir("resume");
  Run straight(20);
  straight.go();

  {
    Run first(10);
    io::CheckpointManager mgr(dir.path.string(), 5);
    first.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 0, 0, nullptr));
    CHECK(first.go() == 10);
  }
  Run second(20);  // a new object graph, as a new process would build
  io::CheckpointManager mgr(dir.path.string(), 5);
  REQUIRE(second.trainer.restore_latest(mgr));
  CHECK(second.trainer.global_step() == 10);
  CHECK(second.go() == 20);

  auto& a = straight.net.parameters();
  auto& b = second.net.parameters();
  CHECK((a.values() == b.values()).all());
  CHECK((a.state() == b.state()).all());  // BN moving statistics
  // optimizer slots and EMA shadows too
  auto sa = straight.trainer.state_dict(), sb = second.trainer.state_dict();
  for (const auto& [name, t] : sa.tensors()) {
    INFO(name);
    REQUIRE(sb.find(name));
    CHECK(sb.at(name).bytes == t.bytes);
  }
}

TEST_CASE("A diverging run stops with 'Model diverged with loss = NaN' and keeps its last good checkpoint",
          "[train][nan]") {
  TempDir dir("nan");
  Run run(1000);
  run.src.poison_at = 12;
  io::CheckpointManager mgr(dir.path.string(), 5);
  run.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 1, 0, nullptr));
  try {
    run.go();
    FAIL("training did not diverge");
  } catch (const NumericsError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("Model diverged with loss = NaN"));
  }
  const std::int64_t stopped = run.trainer.global_step();
  CHECK(stopped == 12);
  // every parameter is still finite (no update with a NaN gradient was applied)
  CHECK(run.net.parameters().values().isFinite().all());
  io::CheckpointManager again(dir.path.string(), 5);
  auto r = again.restore_latest();
  REQUIRE(r);
  CHECK(r->warnings.empty());
  CHECK(*io::global_step(r->dict) == stopped);
}

TEST_CASE(
    "The trainer reports the chain's weight decay as the regularization, added before the numerics check",
    "[train][weight_decay]") {
  // By hand: cross-entropy, backward, weight decay, clip, momentum.
  M ref{{3, 6, 6}, DataFormat::NHWC, {}, 3};
  Source src;
  const train::Batch& b = src.next();
  Tensor<float> dlogits;
  const double ce = softmax_cross_entropy(ref.forward(b.images, Mode::Train), b.labels, &dlogits);
  ref.backward(dlogits);
  auto& P = ref.parameters();
  const double reg = optim::weight_decay(P, 1e-3);
  optim::clip_by_global_norm(P, 5.0);
  optim::Momentum<float>(P, optim::MomentumOptions().momentum(0.9)).step(P, 0.05);

  Run run(1);
  const train::StepResult r = run.trainer.step(run.src.next());
  CHECK(r.loss == ce);
  CHECK(reg > 0);
  CHECK(r.regularization == reg);
  CHECK(r.total_loss == ce + reg);
  CHECK(r.regularization == run.opt.get<optim::WeightDecay>().loss());
  CHECK((run.net.parameters().values() == P.values()).all());

  // A regularization that overflows stops the step before any update.
  Run huge(1, 0.05, 1e38);
  const Eigen::ArrayXf before = huge.net.parameters().values();
  CHECK_THROWS_WITH(huge.trainer.step(huge.src.next()), Catch::Contains("Model diverged with loss = NaN"));
  CHECK((huge.net.parameters().values() == before).all());
  CHECK(huge.trainer.global_step() == 0);
}

TEST_CASE("Hooks log like the seeds, checkpoint every N steps keeping K, and write TensorBoard summaries",
          "[train][hooks]") {
  TempDir dir("hooks");
  Run run(30);
  std::ostringstream log, eps, steps;
  io::CheckpointOptions co;
  co.max_to_keep = 2;
  io::CheckpointManager mgr(dir.path.string(), co);
  io::EventWriter events((dir.path / "events").string());
  run.trainer.add_hook(std::make_shared<train::LoggingHook>(10, log));
  auto eps_hook = std::make_shared<train::ExamplesPerSecondHook>(10, eps);
  run.trainer.add_hook(eps_hook);
  run.trainer.add_hook(std::make_shared<train::StepLogHook>(10, steps));
  run.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 7, 0, nullptr));
  run.trainer.add_hook(std::make_shared<train::SummaryHook>(events, 10, 15));
  run.go();
  CHECK_THAT(log.str(), Catch::StartsWith("step = 1, loss = "));
  CHECK_THAT(log.str(), Catch::Contains("step = 30, loss = ") && Catch::Contains("learning_rate = 0.0005"));
  CHECK_THAT(eps.str(), Catch::Contains("Average examples/sec: ") && Catch::Contains("), step = 30"));
  CHECK(eps_hook->average() > 0);
  CHECK_THAT(steps.str(), Catch::Contains("step 20, loss = ") && Catch::Contains("sec/batch)"));
  // saved at 7, 14, 21, 28 and 30 (the end); the newest two are kept
  REQUIRE(mgr.checkpoints().size() == 2);
  CHECK(mgr.checkpoints()[0].step == 28);
  CHECK(mgr.checkpoints()[1].step == 30);
  CHECK_FALSE(fs::exists(dir.path / "model.ckpt-21.safetensors"));
  events.flush();
  auto evs = io::read_events(events.path());
  std::size_t scalars = 0, histos = 0;
  for (const auto& e : evs)
    if (e.summary)
      for (const auto& v : *e.summary) {
        scalars += v.is_scalar();
        histos += v.is_histogram();
      }
  CHECK(scalars >= 3 * 5);
  CHECK(histos > 0);
  // After the file_version event: a SessionLog START at the first step this
  // run logs (TensorBoard drops a killed run's later events on resume).
  REQUIRE(evs.size() > 2);
  REQUIRE(evs[1].session_log);
  CHECK(evs[1].session_log->status == io::SessionLog::kStart);
  CHECK(evs[1].step == 1);
}

TEST_CASE("evaluate computes precision@1 in inference mode, with EMA weights swapped in and back",
          "[train][eval]") {
  Run run(15);
  run.go();
  Source eval_src;
  std::size_t calls = 0;
  auto next = [&]() -> const train::Batch& {
    ++calls;
    return eval_src.next();
  };
  const std::vector<float> before(
      run.net.parameters().values().data(),
      run.net.parameters().values().data() + run.net.parameters().values().size());
  train::EvalResult r;
  {
    auto guard = run.ema.swap_in(run.net.parameters());
    r = train::evaluate(run.net, next, 4);
  }
  CHECK(calls == 4);
  CHECK(r.total == 32);
  CHECK(r.correct <= r.total);
  CHECK(std::isfinite(r.loss));
  CHECK(std::equal(before.begin(), before.end(), run.net.parameters().values().data()));
}

// ---------------------------------------- checkpoint failures and corruption (issue 9)

namespace {
/// Makes the save of `step` fail: its target is a non-empty directory, which
/// a rename cannot replace.
void block_checkpoint(const fs::path& dir, std::int64_t step) {
  fs::create_directories(dir / ("model.ckpt-" + std::to_string(step) + ".safetensors") / "occupied");
}
}  // namespace

TEST_CASE("A failed checkpoint stops training by default, with the previous checkpoint intact",
          "[train][checkpoint][errors]") {
  TempDir dir("ckpt_stop");
  Run run(30);
  io::CheckpointManager mgr(dir.path.string(), 5);
  run.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 7, 0, nullptr));
  block_checkpoint(dir.path, 14);
  CHECK(run.trainer.checkpoint_error_policy() == train::CheckpointErrorPolicy::Stop);
  try {
    run.go();
    FAIL("training did not stop");
  } catch (const io::CheckpointSaveError& e) {
    CHECK(e.step() == 14);
    REQUIRE(e.previous());
    CHECK(e.previous()->step == 7);
    CHECK_THAT(std::string(e.what()), Catch::Contains("model.ckpt-14.safetensors"));
  }
  CHECK(run.trainer.global_step() == 14);
  CHECK(run.trainer.checkpoint_failures() == 1);
  io::CheckpointManager again(dir.path.string(), 5);
  auto r = again.restore_latest();
  REQUIRE(r);
  CHECK(r->warnings.empty());
  CHECK(r->checkpoint.step == 7);
}

TEST_CASE("With CheckpointErrorPolicy::Continue training goes on and the next checkpoint retries",
          "[train][checkpoint][errors]") {
  TempDir dir("ckpt_continue");
  Run straight(30);
  straight.go();

  Run run(30);
  io::CheckpointManager mgr(dir.path.string(), 5);
  std::ostringstream log;
  run.trainer.set_checkpoint_error_policy(train::CheckpointErrorPolicy::Continue, &log);
  run.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 7, 0, nullptr));
  block_checkpoint(dir.path, 14);
  CHECK(run.go() == 30);
  CHECK(run.trainer.checkpoint_failures() == 1);
  CHECK_THAT(log.str(),
             Catch::StartsWith("WARNING: cifarnet: cannot write '" +
                               (dir.path / "model.ckpt-14.safetensors").string() + "': rename from"));
  CHECK_THAT(log.str(), Catch::EndsWith("; checkpoint step 14 was not saved, the latest is still '" +
                                        (dir.path / "model.ckpt-7.safetensors").string() +
                                        "' (step 7); training continues (failure 1), the next checkpoint "
                                        "retries\n"));
  std::vector<std::int64_t> steps;
  for (const auto& c : mgr.checkpoints()) steps.push_back(c.step);
  CHECK(steps == std::vector<std::int64_t>{7, 21, 28, 30});
  // a failed save changes nothing in the training itself
  CHECK((run.net.parameters().values() == straight.net.parameters().values()).all());

  SECTION("a failed final checkpoint still ends run() with the error, after every hook's end") {
    TempDir dir2("ckpt_final");
    Run last(30);
    io::CheckpointManager mgr2(dir2.path.string(), 5);
    std::ostringstream log2;
    bool ended = false;
    struct EndHook : train::Hook {
      bool* ended;
      explicit EndHook(bool* e) : ended(e) {}
      void end(train::TrainerBase&) override { *ended = true; }
    };
    last.trainer.set_checkpoint_error_policy(train::CheckpointErrorPolicy::Continue, &log2);
    last.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr2, 7, 0, nullptr));
    last.trainer.add_hook(std::make_shared<EndHook>(&ended));
    block_checkpoint(dir2.path, 30);
    CHECK_THROWS_AS(last.go(), io::CheckpointSaveError);
    CHECK(ended);
    CHECK(last.trainer.global_step() == 30);
    CHECK(last.trainer.checkpoint_failures() == 1);
    CHECK(mgr2.latest() == (dir2.path / "model.ckpt-28.safetensors").string());
  }
}

TEST_CASE("The checkpoint-error policy parses 'stop' and 'continue' and names the flag otherwise",
          "[train][checkpoint]") {
  CHECK(train::parse_checkpoint_error_policy("stop") == train::CheckpointErrorPolicy::Stop);
  CHECK(train::parse_checkpoint_error_policy("continue") == train::CheckpointErrorPolicy::Continue);
  CHECK_THROWS_WITH(train::parse_checkpoint_error_policy("retry", "--on_checkpoint_error"),
                    "cifarnet: --on_checkpoint_error must be 'stop' or 'continue', got 'retry'");
}

TEST_CASE("Resuming skips a corrupt newest checkpoint, sets it aside, and ends equal to an uninterrupted run",
          "[train][checkpoint][crc]") {
  TempDir dir("ckpt_corrupt");
  Run straight(20);
  straight.go();
  std::vector<std::uint8_t> good20, bad20;
  const fs::path p20 = dir.path / "model.ckpt-20.safetensors";
  {
    Run first(20);
    io::CheckpointManager mgr(dir.path.string(), 5);
    first.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 5, 0, nullptr));
    first.go();
    good20 = io::read_file(p20.string());
    bad20 = good20;
    bad20[bad20.size() / 2] ^= 0x40;  // a flipped bit in the data
    std::ofstream(p20, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bad20.data()), std::streamsize(bad20.size()));
  }
  Run second(20);
  io::CheckpointManager mgr(dir.path.string(), 5);
  second.trainer.add_hook(std::make_shared<train::CheckpointHook>(mgr, 5, 0, nullptr));
  std::ostringstream log;
  REQUIRE(second.trainer.restore_latest(mgr, &log));
  CHECK(second.trainer.global_step() == 15);
  CHECK_THAT(log.str(),
             Catch::StartsWith("WARNING: skipping checkpoint '" + p20.string() +
                               "' (step 20): cifarnet: file '" + p20.string() + "' at byte offset "));
  CHECK_THAT(log.str(), Catch::Contains("CRC-32C mismatch in tensor '"));
  CHECK_THAT(log.str(), Catch::Contains("WARNING: set the corrupt checkpoint '" + p20.string() +
                                        "' aside as '" + p20.string() + ".corrupt'\n"));
  CHECK_THAT(log.str(), Catch::EndsWith("Restored " + (dir.path / "model.ckpt-15.safetensors").string() +
                                        " (global step 15)\n"));
  CHECK(second.go() == 20);
  CHECK((second.net.parameters().values() == straight.net.parameters().values()).all());
  CHECK(io::read_file(p20.string()) == good20);              // rewritten, equal to the original
  CHECK(io::read_file(p20.string() + ".corrupt") == bad20);  // the corrupt one kept
}

// ------------------------------------------------ TF-Slim's train() options

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
      CHECK(ls[i].wall_time - ls[i - 1].wall_time >= secs - 1e-3);
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
    "startup_delay_steps: worker k waits for global step k*N before its first step, the chief not at all",
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
  SECTION("worker 2, N = 3: waits until the global step reads 6") {
    FakeGlobalStep g;
    CHECK(run_worker(2, 3, 10, g) == 6);
    CHECK(g.reads == 7);  // read 0, 1, ..., 6
    CHECK(g.reads_before_first_step == 7);
  }
  SECTION("worker 1, N = 5") {
    FakeGlobalStep g;
    CHECK(run_worker(1, 5, 4, g) == 4);  // capped at max_steps, as Slim's min(delay, number_of_steps)
    CHECK(g.reads == 5);
  }
  SECTION("worker 3, N = 2, max_steps 100: 6") {
    FakeGlobalStep g;
    CHECK(run_worker(3, 2, 3, g) == 3);
    FakeGlobalStep h;
    CHECK(run_worker(3, 2, 100, h) == 6);
    CHECK(h.reads == 7);
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
    io::load_parameters(*local, d);
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
