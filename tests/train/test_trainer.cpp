// The training loop: exact resume through a checkpoint, NaN abort keeping
// the last good checkpoint, hooks (logging, checkpoints, summaries), eval,
// checkpoint-error policies (test_trainer_hooks.cpp: summaries by wall time,
// startup delay, traces, init_fn, remote variables).
#include "trainer_support.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

using namespace trainer_test;

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

TEST_CASE("evaluate's precision@1 and loss on batches whose answers are known", "[train][eval]") {
  // Logits = each channel's mean (global average pool, then an identity
  // dense layer without bias): the prediction of an image is its brightest
  // channel, and the loss is the softmax cross-entropy of those means.
  using Id = Sequential<GlobalAvgPool, Dense<3, 3>>;
  Model<Id, backend::Reference> net({3, 2, 2}, DataFormat::NHWC, {}, 1);
  auto& P = net.parameters();
  REQUIRE(P.count() == 2);  // the dense layer's weights (3, 3) and biases (3)
  for (std::size_t id = 0; id < P.count(); ++id) {
    float* v = P.value(id);
    for (std::size_t i = 0; i < P.info(id).size; ++i)
      v[i] = P.info(id).shape.size() == 2 && i % 4 == 0 ? 1.0f : 0.0f;  // (In, Out) identity, zero biases
  }
  // Channel means and labels: 4 of the 7 images are predicted right.
  const std::vector<std::array<float, 3>> means = {{3, 1, 0}, {0, 2, 1}, {1, 0, 4}, {5, 1, 2},
                                                   {0, 0, 1}, {2, 3, 1}, {1, 2, 0}};
  const std::vector<std::int32_t> labels = {0, 1, 0, 2, 2, 0, 1};  // predicted: 0 1 2 0 2 1 1
  std::vector<train::Batch> batches(2);
  for (std::size_t b = 0; b < 2; ++b) {
    const std::size_t first = b * 4, n = b == 0 ? 4 : 3;
    batches[b].images = make_tensor<float>({n, 3, 2, 2}, DataFormat::NHWC);  // indexed (n, h, w, c)
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t c = 0; c < 3; ++c)
        for (std::size_t y = 0; y < 2; ++y)
          for (std::size_t x = 0; x < 2; ++x)  // mean m: m - 1, m + 1, m - 0.5, m + 0.5
            batches[b].images(i, y, x, c) =
                means[first + i][c] + (y == 0 ? 1.0f : 0.5f) * (x == 0 ? -1.0f : 1.0f);
      batches[b].labels.push_back(labels[first + i]);
    }
  }
  double want_loss = 0;
  for (std::size_t i = 0; i < means.size(); ++i) {
    double z = 0;
    for (float m : means[i]) z += std::exp(double(m));
    want_loss += std::log(z) - double(means[i][std::size_t(labels[i])]);
  }
  want_loss /= double(means.size());
  std::size_t k = 0;
  const train::EvalResult r = train::evaluate(
      net, [&]() -> const train::Batch& { return batches[k++]; }, 2);
  CHECK(r.total == 7);
  CHECK(r.correct == 4);
  CHECK(r.precision() == Approx(4.0 / 7.0));
  CHECK(r.loss == Approx(want_loss).epsilon(1e-5));
  // The same batches through a stream that ends: evaluated to its end.
  struct Two : data::BatchStream {
    const std::vector<train::Batch>* b;
    std::size_t i = 0;
    bool next(train::Batch& out) override {
      if (i == b->size()) return false;
      out = (*b)[i++];
      return true;
    }
    data::PipelinePosition position() const override { return {}; }
    void restore(const data::PipelinePosition&) override {}
    void reseed(std::uint64_t) override {}
  } stream;
  stream.b = &batches;
  const train::EvalResult s = train::evaluate(net, stream);
  CHECK(s.total == 7);
  CHECK(s.correct == 4);
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

namespace {
// A model whose arena says it lives on a device (the CUDA backend's
// Model::set_device_resident): counts the Trainer's calls that bring the
// host copy current for reading and for writing.
struct ResidentCounting : trainer_test::M {
  using trainer_test::M::M;
  bool device_resident() const { return true; }
  const Parameters<float>& sync_parameters_to_host() {
    ++reads;
    return trainer_test::M::parameters();
  }
  Parameters<float>& host_parameters() {
    ++writes;
    return trainer_test::M::parameters();
  }
  int reads = 0, writes = 0;
};
}  // namespace

TEST_CASE(
    "With a device-resident arena the Trainer syncs the host copy only where the host reads or writes it",
    "[train][resident]") {
  using namespace trainer_test;
  ResidentCounting net({3, 6, 6}, DataFormat::NHWC, {}, 3);
  optim::Momentum<float> opt(net.M::parameters(), optim::MomentumOptions().momentum(0.9));
  train::Trainer<ResidentCounting> t(net, train::TrainerOptions().max_steps(5));
  t.set_optimizer(opt, [](std::int64_t) { return 0.1; });
  Source src;
  t.step(src.next());
  t.step(src.next());
  CHECK(net.reads == 0);  // the steps themselves read nothing back to the host
  CHECK(net.writes == 0);
  const auto saved = t.state_dict();  // a checkpoint reads the arena and the slots
  CHECK(net.reads == 1);
  t.visit_parameters([](const ParamInfo&, const float*, const float*) {});  // summaries
  CHECK(net.reads == 2);
  t.load_state_dict(saved);  // a restore writes them
  CHECK(net.writes == 1);
  (void)t.parameters();  // init_fn's view: read and write
  CHECK(net.writes == 2);
  CHECK(net.reads == 2);
}

TEST_CASE("A batch of byte images trains exactly as the same images as floats", "[train][bytes]") {
  // Whole pixel values, as the ResNet pipeline's (PadCrop, flips) are.
  Run floats(6), bytes(6);
  Rng rng(11);
  std::vector<train::Batch> fb(6), bb(6);
  for (std::size_t k = 0; k < fb.size(); ++k) {
    train::Batch& f = fb[k];
    train::Batch& b = bb[k];
    f.images = make_tensor<float>({8, 3, 6, 6}, DataFormat::NHWC);
    b.pixel_height = b.pixel_width = 6;
    b.pixel_channels = 3;
    for (auto& v : f.images) {
      const auto byte = std::uint8_t(rng.uniform_int(256));
      v = float(byte);
      b.pixels.push_back(byte);  // NHWC floats and HWC bytes: the same order
    }
    for (int i = 0; i < 8; ++i) f.labels.push_back(std::int32_t(rng.uniform_int(5)));
    b.labels = f.labels;
    CHECK(b.has_pixels());
  }
  std::size_t i = 0, j = 0;
  floats.trainer.run([&]() -> const train::Batch& { return fb[i++]; });
  bytes.trainer.run([&]() -> const train::Batch& { return bb[j++]; });
  CHECK((floats.net.parameters().values() == bytes.net.parameters().values()).all());
  CHECK((floats.net.parameters().state() == bytes.net.parameters().state()).all());
  // Evaluation takes byte batches too.
  const auto ef = train::evaluate(
      floats.net, [&]() -> const train::Batch& { return fb[0]; }, 1);
  const auto eb = train::evaluate(
      bytes.net, [&]() -> const train::Batch& { return bb[0]; }, 1);
  CHECK(ef.correct == eb.correct);
  CHECK(ef.loss == eb.loss);
  // A byte batch whose size disagrees with its geometry is a clear error.
  train::Batch bad = bb[0];
  bad.pixel_height = 5;
  CHECK_THROWS_WITH(bytes.net.forward_pixels_on_device(bad.pixels.data(), bad.size(), bad.pixel_height,
                                                       bad.pixel_width, bad.pixel_channels),
                    Catch::Contains("byte images of 5x6x3"));
}
