// Tests of distributed/parameter_server.hpp, run by `mpirun -np 3`: every
// rank runs every case in the same order; rank 0 (and in one case rank 1) is
// a parameter server, the others are workers. Single-process references are
// computed locally on the rank that compares.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/demo/synthetic_cifar.hpp>
#include <cifarnet/distributed/data_parallel.hpp>
#include <cifarnet/distributed/parameter_server.hpp>
#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>
#include "instances/resnet.hpp"

using namespace cifarnet;
namespace dist = cifarnet::distributed;
namespace fs = std::filesystem;

namespace {

using Net = Model<ResNetCifar<>, backend::OneDnn>;
using Recipe = optim::Chain<optim::WeightDecay, optim::Momentum>;
const double kLr = 0.05, kWd = 2e-4;
// Two asynchronous workers: stale gradients under momentum 0.9 act as extra
// momentum, and at kLr the end of an 80-step run depends on the interleaving
// (2.89 -> 0.58 .. 1.93 in 10 runs, 3.16 once under ctest -j3 on 2 cores).
// At 0.01 the loss fell to 0.22 .. 1.22 in 16 runs, 8 of them with both
// cores busy with other work.
const double kAsyncLr = 0.01;
// BN moving statistics that move visibly in a short run.
const NetOptions kOpts = resnet_options(8, 0.5);

dist::Communicator& world() {
  static dist::Communicator c(MPI_COMM_WORLD, 120);
  return c;
}

/// The ranks with the same `color` (collective on the world); freed on scope exit.
struct Split {
  MPI_Comm comm = MPI_COMM_NULL;
  explicit Split(int color) { MPI_Comm_split(MPI_COMM_WORLD, color, world().rank(), &comm); }
  ~Split() { MPI_Comm_free(&comm); }
  Split(const Split&) = delete;
  Split& operator=(const Split&) = delete;
};

/// A directory shared by the ranks (named by the world's rank 0 pid).
std::string shared_dir(const std::string& name) {
  std::int64_t pid = world().rank() == 0 ? std::int64_t(::getpid()) : 0;
  world().broadcast(&pid, 1, 0);
  const fs::path d = fs::temp_directory_path() / ("cifarnet_ps_" + std::to_string(pid) + "_" + name);
  world().barrier();
  if (world().rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  world().barrier();
  return d.string();
}

/// `n` batches of `batch` learnable synthetic images (NHWC), the same for a seed.
std::vector<train::Batch> make_batches(std::size_t n, std::size_t batch, std::uint64_t seed) {
  const data::ImageSet set = data::synthetic_cifar(n * batch, seed);
  std::vector<train::Batch> out(n);
  for (std::size_t b = 0; b < n; ++b) {
    out[b].images = make_tensor<float>({batch, 3, 32, 32}, DataFormat::NHWC);
    for (std::size_t i = 0; i < batch; ++i) {
      const std::size_t k = (b * batch + i) * 7 % (n * batch);  // classes mixed within a batch
      const std::uint8_t* img = set.image(k);                   // CHW bytes
      for (std::size_t c = 0; c < 3; ++c)
        for (std::size_t p = 0; p < 32 * 32; ++p)
          out[b].images.data()[(i * 32 * 32 + p) * 3 + c] = float(img[c * 32 * 32 + p]) / 64.0f - 2.0f;
      out[b].labels.push_back(set.labels[k]);
    }
  }
  return out;
}

/// Mean cross-entropy over `batches` with batch statistics (Mode::Train
/// forward, no update): a short run's BN moving statistics are not settled.
double train_loss(Net& net, const std::vector<train::Batch>& batches) {
  double sum = 0;
  std::size_t n = 0;
  for (const auto& b : batches) {
    const Tensor<float>& logits = net.forward(b.images, Mode::Train);
    const std::size_t rows = logits.shape()[0], k = logits.size() / rows;
    for (std::size_t i = 0; i < rows; ++i) {
      const float* z = logits.data() + i * k;
      double m = z[0], e = 0;
      for (std::size_t j = 1; j < k; ++j) m = std::max(m, double(z[j]));
      for (std::size_t j = 0; j < k; ++j) e += std::exp(double(z[j]) - m);
      sum += m + std::log(e) - double(z[b.labels[i]]);
      ++n;
    }
  }
  return sum / double(n);
}

/// A server's side of a job: its optimizer over its shard, the chief's
/// broadcast state, then serve() until every worker has finished.
dist::ServeStats serve(dist::Communicator& c, Net& net, const dist::PsRoles& roles,
                       double serve_timeout = 0) {
  dist::ParameterServer<float> ps(c, net.parameters(), roles);
  std::optional<optim::Momentum<float>> opt;
  if (auto sel = ps.selection()) opt.emplace(net.parameters(), optim::MomentumOptions().momentum(0.9), *sel);
  cifarnet::StateDict initial;
  dist::broadcast_state_dict(c, initial, roles.chief_rank());
  // The start's waits (the layout check, the chief's state) take as long as
  // the slowest rank's setup; only serving has the short deadline, as
  // recipes::Strategy does (StrategyOptions::startup_timeout).
  if (serve_timeout > 0) c.set_timeout(serve_timeout);
  return ps.serve(opt ? &*opt : nullptr, initial);
}

/// A worker that joins a job (the collective layout check and the chief's
/// state broadcast) and does nothing more.
void join(dist::Communicator& c, Net& net, const dist::PsRoles& roles) {
  dist::ParameterServerClient<float> client(c, net.parameters(), roles);
  Recipe opt(net.parameters(), optim::WeightDecayOptions(kWd), optim::MomentumOptions());
  train::Trainer<Net> t(net);
  t.set_optimizer(opt, [](std::int64_t) { return kLr; });
  cifarnet::StateDict d;
  if (roles.is_chief()) d = t.state_dict();
  dist::broadcast_state_dict(c, d, roles.chief_rank());
}

/// What a worker saw.
struct WorkerRun {
  std::vector<double> losses;
  std::int64_t first_step = -1, last_step = -1, restored_step = -1;
  dist::WorkerStats stats;
  cifarnet::StateDict final_state;  ///< the chief's: the servers' state once every worker stopped
};

/// One worker's side: the chief restores from `ckpt` when it has a
/// checkpoint and broadcasts its state; train to `max_steps` global steps on
/// batches[(global step + 3 · worker) mod n]; once every worker has stopped
/// (barrier on `workers`), the chief fetches the final state and saves it to
/// `ckpt`; then finish().
WorkerRun work(dist::Communicator& c, dist::Communicator& workers, Net& net, const dist::PsRoles& roles,
               const std::vector<train::Batch>& batches, std::int64_t max_steps, io::CheckpointManager* ckpt,
               double lr = kLr) {
  dist::ParameterServerClient<float> client(c, net.parameters(), roles);
  Recipe opt(net.parameters(), optim::WeightDecayOptions(kWd), optim::MomentumOptions().momentum(0.9));
  train::Trainer<Net> t(net, train::TrainerOptions().max_steps(max_steps));
  t.set_optimizer(opt, [lr](std::int64_t) { return lr; });
  client.expect_slots(opt);
  WorkerRun r;
  cifarnet::StateDict d;
  if (roles.is_chief()) {
    if (ckpt && t.restore_latest(*ckpt)) r.restored_step = t.global_step();
    d = t.state_dict();
  }
  dist::broadcast_state_dict(c, d, roles.chief_rank());
  t.set_remote_variables(&client);
  t.add_hook(std::make_shared<train::LambdaHook>([&](train::TrainerBase&, const train::StepResult& s) {
    if (r.first_step < 0) r.first_step = s.step;
    r.last_step = s.step;
    r.losses.push_back(s.loss);
  }));
  const std::size_t shift = 3 * std::size_t(roles.worker_index());
  t.run([&]() -> const train::Batch& {
    return batches[(std::size_t(t.global_step()) + shift) % batches.size()];
  });
  workers.barrier("the workers' end");  // every update is in
  if (roles.is_chief()) {
    r.final_state = t.state_dict();
    if (ckpt) ckpt->save(io::global_step(r.final_state).value(), r.final_state);
  }
  workers.barrier("the chief's checkpoint");
  r.stats = client.stats();
  client.finish();
  return r;
}

/// The single-process run the one-worker jobs must follow.
cifarnet::StateDict reference(const std::vector<train::Batch>& batches, std::int64_t steps) {
  Net ref({3, 32, 32}, DataFormat::NHWC, kOpts, 1);
  Recipe opt(ref.parameters(), optim::WeightDecayOptions(kWd), optim::MomentumOptions().momentum(0.9));
  train::Trainer<Net> t(ref, train::TrainerOptions().max_steps(steps));
  t.set_optimizer(opt, [](std::int64_t) { return kLr; });
  t.run([&]() -> const train::Batch& { return batches[std::size_t(t.global_step()) % batches.size()]; });
  return t.state_dict();
}

/// Largest |a - b| over the tensors of `a` whose name ends with `suffix`
/// ("" = all), each required in `b`.
double max_diff(const cifarnet::StateDict& a, const cifarnet::StateDict& b, const std::string& suffix,
                std::size_t* n = nullptr) {
  double m = 0;
  std::size_t count = 0;
  for (const auto& [name, t] : a) {
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const cifarnet::TensorData* u = b.find(name);
    REQUIRE(u);
    const auto x = t.to_floating<double>(), y = u->to_floating<double>();
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
    ++count;
  }
  if (n) *n = count;
  return m;
}

}  // namespace

TEST_CASE("Parameter servers: roles, and variables dealt round robin after the global step",
          "[distributed][ps]") {
  REQUIRE(world().size() == 3);
  const dist::PsRoles roles(3, 0, 1);
  CHECK(roles.is_ps());
  CHECK(roles.num_workers() == 2);
  CHECK(roles.chief_rank() == 1);
  CHECK(dist::PsRoles(3, 1, 1).is_chief());
  CHECK(dist::PsRoles(3, 2, 1).worker_index() == 1);
  CHECK_THROWS_WITH(dist::PsRoles(3, 0, 3), Catch::Contains("--num-ps 3 with mpirun -np 3 leaves no worker"));
  CHECK_THROWS_WITH(dist::PsRoles(3, 0, 0), Catch::Contains("at least one parameter server"));

  Net net({3, 32, 32}, DataFormat::NHWC, kOpts, 1);
  const auto& P = net.parameters();
  const dist::ShardMap one(P, 1), two(P, 2);
  std::size_t elements = 0;
  for (std::size_t id = 0; id < P.count(); ++id) {
    CHECK(one.owner(id) == 0);
    CHECK(two.owner(id) == int((id + 1) % 2));  // the global step took server 0's first turn
    elements += P.info(id).size;
  }
  CHECK(two.ids(1).front() == 0);
  CHECK(two.ids(0).front() == 1);
  CHECK(one.elements(0) == elements);
  CHECK(two.elements(0) + two.elements(1) == elements);
  for (int ps = 0; ps < 2; ++ps) {  // BN moving statistics are variables too: some on each server
    bool state = false, trainable = false;
    for (std::size_t id : two.ids(ps)) (P.info(id).trainable ? trainable : state) = true;
    CHECK(state);
    CHECK(trainable);
  }
}

TEST_CASE("One worker against parameter servers follows the single process, across a resume",
          "[distributed][ps]") {
  // With one worker nothing is stale: pull, compute, push is one local step
  // whose update runs on the servers. 3 steps, a checkpoint, a restart from
  // it (a fresh job whose models start elsewhere) and 3 more steps must end
  // where 6 single-process steps end: the trainable variables and momentum
  // slots exactly (same kernels, same arithmetic), the BN moving statistics
  // within rounding (a server adds the worker's change to its copy: m + (m' -
  // m) in float).
  auto& w = world();
  const std::vector<train::Batch> batches = make_batches(4, 8, 5);
  const std::string dir = shared_dir("one_worker");
  for (int num_ps : {2, 1}) {  // 2 servers + 1 worker: the world; 1 + 1: ranks 0 and 1
    INFO("servers: " << num_ps);
    const bool in_job = !(num_ps == 1 && w.rank() == 2);
    Split job(in_job ? 0 : 1);
    Split workers(in_job && w.rank() >= num_ps ? 0
                                               : 1 + w.rank());  // (dup is collective: no shared leftovers)
    if (!in_job) continue;
    dist::Communicator c(job.comm, 120), wc(workers.comm, 120);
    const dist::PsRoles roles(c.size(), c.rank(), num_ps);
    REQUIRE(roles.num_workers() == 1);
    io::CheckpointManager mgr(dir + "/ps" + std::to_string(num_ps), 3);
    for (int phase = 0; phase < 2; ++phase) {
      INFO("phase " << phase);
      Net net({3, 32, 32}, DataFormat::NHWC, kOpts, 1 + std::uint64_t(phase));  // phase 1 starts elsewhere
      if (roles.is_ps()) {
        const dist::ServeStats st = serve(c, net, roles);
        CHECK(st.updates == 3);
        CHECK(st.updates_per_worker == std::vector<std::int64_t>{3});
        CHECK(st.max_staleness == 0);
        CHECK(st.fetches == 1);  // the chief's final state (its first one was its own, broadcast)
        if (c.rank() == 0) CHECK(st.global_step == 3 * (phase + 1));
      } else {
        const WorkerRun r = work(c, wc, net, roles, batches, 3 * (phase + 1), &mgr);
        CHECK(r.restored_step == (phase == 0 ? -1 : 3));
        CHECK(r.first_step == 3 * phase + 1);
        CHECK(r.last_step == 3 * phase + 3);
        CHECK(r.stats.updates == 3);
        CHECK(r.stats.max_staleness == 0);
        if (phase == 1) {
          const cifarnet::StateDict ref = reference(batches, 6);
          std::size_t nw = 0, nm = 0;
          CHECK(max_diff(ref, r.final_state, "weights", &nw) == 0.0);
          CHECK(max_diff(ref, r.final_state, "/Momentum", &nm) == 0.0);
          CHECK(nw > 5);
          CHECK(nm > 5);
          CHECK(max_diff(ref, r.final_state, "moving_mean") < 1e-5);
          CHECK(max_diff(ref, r.final_state, "moving_variance") < 1e-4);
          CHECK(io::global_step(r.final_state) == 6);
        }
      }
    }
  }
  w.barrier();
}

TEST_CASE("Two workers train asynchronously against one server: loss falls, a checkpoint resumes",
          "[distributed][ps]") {
  auto& w = world();
  const dist::PsRoles roles(3, w.rank(), 1);
  const std::vector<train::Batch> batches = make_batches(4, 8, 11);
  const std::string dir = shared_dir("two_workers");
  Split workers(roles.is_worker() ? 0 : 1);
  dist::Communicator wc(workers.comm, 120);
  io::CheckpointManager mgr(dir, 3);
  const std::int64_t kSteps = 80, kMore = 10;
  std::int64_t saved_step = -1;
  for (int phase = 0; phase < 2; ++phase) {
    INFO("phase " << phase);
    Net net({3, 32, 32}, DataFormat::NHWC, kOpts, 1 + std::uint64_t(phase));
    const std::int64_t target = phase == 0 ? kSteps : saved_step + kMore;
    std::int64_t ps_end = -1;
    if (roles.is_ps()) {
      const dist::ServeStats st = serve(w, net, roles);
      // Both workers' updates arrived, none waited for the other's.
      CHECK(st.updates_per_worker.size() == 2);
      CHECK(st.updates_per_worker[0] > 0);
      CHECK(st.updates_per_worker[1] > 0);
      CHECK(st.global_step >= target);
      CHECK(st.global_step <= target + 1);  // one worker may push once more after the other reached it
      CHECK(st.global_step - st.updates ==
            (phase == 0 ? 0 : saved_step));  // resumed from the checkpoint's step
      std::printf(
          "parameter server, phase %d: %lld updates (%lld and %lld by the workers), staleness mean %.2f "
          "max %lld, global step %lld\n",
          phase, static_cast<long long>(st.updates), static_cast<long long>(st.updates_per_worker[0]),
          static_cast<long long>(st.updates_per_worker[1]), st.mean_staleness(),
          static_cast<long long>(st.max_staleness), static_cast<long long>(st.global_step));
      ps_end = st.global_step;
    } else {
      const double before = roles.is_chief() && phase == 0 ? train_loss(net, batches) : 0.0;
      const WorkerRun r = work(w, wc, net, roles, batches, target, &mgr, kAsyncLr);
      CHECK(r.stats.updates > 0);
      std::printf("worker %d, phase %d: %lld updates, %lld of them stale (mean %.2f, max %lld)\n",
                  roles.worker_index(), phase, static_cast<long long>(r.stats.updates),
                  static_cast<long long>(r.stats.stale_updates), r.stats.mean_staleness(),
                  static_cast<long long>(r.stats.max_staleness));
      if (roles.is_chief()) {
        if (phase == 0) {
          // The loss on the 4 training batches, the chief's initial values
          // against the servers' final ones (now in `net`).
          const double after = train_loss(net, batches);
          std::printf("chief: loss on the training batches %.4f -> %.4f\n", before, after);
          CHECK(after < 0.9 * before);  // the timing decides how far: see kAsyncLr
          saved_step = io::global_step(r.final_state).value();
          CHECK(saved_step >= kSteps);
          REQUIRE(mgr.latest());
          CHECK(mgr.latest()->find("model.ckpt-" + std::to_string(saved_step) + ".") != std::string::npos);
        } else {
          CHECK(r.restored_step == saved_step);
          CHECK(r.first_step > saved_step);
          CHECK(io::global_step(r.final_state).value() >= target);
        }
      }
    }
    w.broadcast(&saved_step, 1, roles.chief_rank());
    w.broadcast(&ps_end, 1, 0);
    if (roles.is_chief() && phase == 0) CHECK(ps_end == saved_step);  // the checkpoint holds every update
  }
  w.barrier();
}

TEST_CASE(
    "Parameter servers: a malformed message, different models and a silent worker end with clear errors",
    "[distributed][ps]") {
  auto& w = world();
  const dist::PsRoles roles(3, w.rank(), 1);
  // A push of the wrong size: the server names the sender.
  {
    Net net({3, 32, 32}, DataFormat::NHWC, kOpts, 1);
    if (roles.is_ps()) {
      CHECK_THROWS_WITH(serve(w, net, roles),
                        Catch::Contains("parameter server") &&
                            Catch::Contains("the push message from rank 2 has 12 bytes"));
    } else {
      join(w, net, roles);
      if (roles.worker_index() == 1) {
        const std::uint8_t junk[12] = {};
        w.send(0, dist::detail::kPush, junk, sizeof junk);
      }
    }
    w.barrier();
  }
  // Different models: every rank says so, none waits.
  {
    Net net({3, 32, 32}, DataFormat::NHWC, resnet_options(w.rank() == 2 ? 14 : 8), 1);
    if (roles.is_ps())
      CHECK_THROWS_WITH(dist::ParameterServer<float>(w, net.parameters(), roles),
                        Catch::Contains("the ranks built different models"));
    else
      CHECK_THROWS_WITH(dist::ParameterServerClient<float>(w, net.parameters(), roles),
                        Catch::Contains("the ranks built different models"));
  }
  // No worker ever sends: the server gives up after its timeout (1 s once
  // serving; the start, where the server waits for the chief's state, has
  // the communicator's default, so a loaded machine cannot end it first).
  {
    dist::Communicator quick(MPI_COMM_WORLD);
    Net net({3, 32, 32}, DataFormat::NHWC, kOpts, 1);
    if (roles.is_ps()) {
      CHECK_THROWS_WITH(
          serve(quick, net, roles, 1.0),
          Catch::Contains("the next message from a worker did not arrive within 1 s on rank 0 of 3"));
    } else {
      join(quick, net, roles);
    }
    w.barrier();
  }
}
