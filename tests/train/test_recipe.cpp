// The library's training recipe pieces (include/cifarnet/recipes/ and the
// pipeline hooks of train/): a pipeline's position checkpointed by
// train::stream_position_saveable, Trainer::run and evaluate on a
// data::BatchStream, the single-process recipes::Strategy (what a program
// gets without mpirun or without MPI) and the device helpers.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/data/pipeline.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/recipes/devices.hpp>
#include <cifarnet/recipes/strategy.hpp>
#include <cifarnet/train/hooks.hpp>
#include <cifarnet/train/trainer.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace cifarnet;

namespace {
using Net = Sequential<resnet::ConvBN<3, 4>, ReLU, GlobalAvgPool, Dense<4, 5>>;
using M = Model<Net, backend::Reference>;

/// 40 varied 6x6 RGB images, labels i % 5.
std::shared_ptr<const data::ImageSetSource> images() {
  data::ImageSet s;
  s.num_classes = 5;
  s.geometry = {6, 6, 3};
  for (std::size_t i = 0; i < 40; ++i) {
    for (std::size_t j = 0; j < 108; ++j) s.pixels.push_back(std::uint8_t((i * 37 + j * (i % 7 + 1)) % 251));
    s.labels.push_back(std::int32_t(i % 5));
  }
  return std::make_shared<const data::ImageSetSource>(std::move(s));
}

using Pipe = data::Pipeline<data::ImageSetSource, data::PadCrop<2>, data::RandomFlipLR>;

data::PipelineOptions train_options(std::uint64_t seed) {
  data::PipelineOptions o = data::recipes::resnet_train_options(seed, 8);
  o.num_workers = 0;
  return o;
}

std::vector<std::int32_t> labels_of(data::BatchStream& s, int batches) {
  std::vector<std::int32_t> out;
  data::Batch b;
  for (int i = 0; i < batches; ++i) {
    REQUIRE(s.next(b));
    out.insert(out.end(), b.labels.begin(), b.labels.end());
  }
  return out;
}
}  // namespace

TEST_CASE("stream_position_saveable puts a pipeline's position in the checkpoint and restores it",
          "[train][recipe][resume]") {
  const auto src = images();
  Pipe a(src, train_options(3));
  labels_of(a, 3);
  auto saveable = train::stream_position_saveable(a);
  io::StateDict d;
  saveable->save(d);
  REQUIRE(d.metadata.count("pipeline/train") == 1);
  CHECK(d.metadata.at("pipeline/train") == a.position().to_string());
  const auto expected = labels_of(a, 4);

  Pipe b(src, train_options(3));
  train::stream_position_saveable(b)->load(d);
  CHECK(labels_of(b, 4) == expected);

  // Another key, and a checkpoint without it: a DataError naming the key.
  io::StateDict other;
  train::stream_position_saveable(b, "pipeline/eval")->save(other);
  CHECK(other.metadata.count("pipeline/eval") == 1);
  CHECK_THROWS_WITH(train::stream_position_saveable(b, "pipeline/other")->load(d),
                    Catch::Contains("has no 'pipeline/other' position"));
}

TEST_CASE("Trainer::run and evaluate take a pipeline, and the trainer checkpoints its position",
          "[train][recipe]") {
  const auto src = images();
  M net({3, 6, 6}, DataFormat::NHWC, {}, 1);
  optim::Chain<optim::Momentum> opt(net.parameters(), optim::MomentumOptions().momentum(0.9));
  Pipe pipe(src, train_options(5));
  train::Trainer<M> trainer(net, train::TrainerOptions().max_steps(4));
  trainer.set_optimizer(opt, optim::Schedule(0.01));
  trainer.add_state(train::stream_position_saveable(pipe));
  CHECK(trainer.run(pipe) == 4);
  CHECK(pipe.position().batches == 4);
  const io::StateDict d = trainer.state_dict();
  CHECK(d.metadata.at("pipeline/train") == pipe.position().to_string());

  // A finite stream that ends before max_steps is an error naming the step.
  data::PipelineOptions once = train_options(5);
  once.epochs = 1;  // 40 examples: 5 batches
  Pipe short_pipe(src, once);
  train::Trainer<M> t2(net, train::TrainerOptions().max_steps(100));
  t2.set_optimizer(opt, optim::Schedule(0.01));
  CHECK_THROWS_WITH(t2.run(short_pipe), Catch::Contains("batch stream ended at global step 5"));

  // evaluate() reads a stream to its end.
  data::PipelineOptions eo = data::recipes::resnet_eval_options(16);
  eo.num_workers = 0;
  data::Pipeline<data::ImageSetSource> eval(src, eo);
  const train::EvalResult r = train::evaluate(net, eval);
  CHECK(r.total == 40);
}

TEST_CASE("a single-process Strategy trains on whole batches with the trainer's own hooks",
          "[train][recipe][strategy]") {
  recipes::Strategy st(nullptr, nullptr);
  st.configure(recipes::StrategyOptions().sync(false).num_ps(2));  // no MPI job: the roles do not apply
  CHECK(st.rank() == 0);
  CHECK(st.size() == 1);
  CHECK(st.chief());
  CHECK_FALSE(st.async());
  CHECK_FALSE(st.parameter_server());
  CHECK(st.worker_index() == 0);
  CHECK(st.describe(128).empty());
  CHECK(st.abort_job(3) == 3);
  st.barrier("nothing to wait for");
  DataFormat fmt = DataFormat::NCHW;
  st.broadcast_from_chief(fmt);
  CHECK(fmt == DataFormat::NCHW);

  const train::TrainerOptions o = st.trainer_options(train::TrainerOptions().max_steps(3), 42.0);
  CHECK(o.max_seconds() == 42.0);  // a single process keeps its own time limit
  CHECK(o.worker_index() == 0);
  REQUIRE(o.global_step_source());
  CHECK(o.global_step_source()() == 0);

  const auto src = images();
  M net({3, 6, 6}, DataFormat::NHWC, {}, 1);
  train::Trainer<M> trainer(net, o);
  st.set_momentum_optimizer(trainer, net, optim::WeightDecayOptions(1e-3),
                            optim::MomentumOptions().momentum(0.9),
                            optim::piecewise_constant({2}, {0.1, 0.01}));
  Pipe pipe(src, train_options(9));
  st.share_state(trainer, pipe, 9);  // nothing to share: the stream keeps its seed
  int steps_seen = 0;
  auto add_hook = st.hooks(trainer, 0);
  add_hook(std::make_shared<train::LambdaHook>(
      [&](train::TrainerBase&, const train::StepResult& r) { steps_seen += int(r.batch_size == 8); }));
  CHECK(trainer.run(st.feed(pipe)) == 3);
  CHECK(steps_seen == 3);
  // The optimizer is weight decay then momentum: its slots are in the checkpoint.
  const io::StateDict d = trainer.state_dict();
  bool has_momentum = false;
  for (const auto& kv : d.tensors())
    has_momentum = has_momentum || kv.first.find("Momentum") != std::string::npos;
  CHECK(has_momentum);
  st.end_training(trainer, std::cerr);
  CHECK(st.allreduce_report(true).empty());
  st.finish();

  // Serving variables needs an MPI job.
  CHECK_THROWS_AS(st.serve(net.parameters(), optim::MomentumOptions(), std::cerr), Error);
}

TEST_CASE("set_intra_op_threads honours an explicit count", "[train][recipe][strategy]") {
  const int before = omp_get_max_threads();
  recipes::Strategy st(nullptr, nullptr);
  st.configure(recipes::StrategyOptions());
  st.set_intra_op_threads(3);
  CHECK(omp_get_max_threads() == 3);
  st.set_intra_op_threads(0);  // one process: OpenMP's choice stays
  CHECK(omp_get_max_threads() == 3);
  omp_set_num_threads(before);
}

TEST_CASE("the device helpers place a CPU job and describe the oneDNN device", "[train][recipe][devices]") {
  const train::GpuPlacement cpu = recipes::place_on_available_gpus(0, /*soft=*/false);
  CHECK(cpu.used == 0);
  CHECK(cpu.notice.empty());
  const dnnl_version_t* v = dnnl_version();
  const std::string version =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  CHECK(backend::onednn::version_string() == version);
  const std::string line = recipes::describe_device<backend::OneDnn>();
  CHECK(line.find("device: CPU, oneDNN " + version + ", ") == 0);
  CHECK(line.find(" OpenMP threads") != std::string::npos);
  M net({3, 6, 6}, DataFormat::NHWC, {}, 1);
  recipes::set_cuda_conv_options(net, true, true);  // not a CUDA model: nothing to set, no error
  CHECK_FALSE(recipes::is_towers<M>::value);
  CHECK(recipes::is_towers<distributed::Towers<M>>::value);
  if (!recipes::kHasCudaBackend) {
    const recipes::GpusPresent g = recipes::gpus_present();
    CHECK(g.count == 0);
    CHECK(g.why_none.find("no CUDA backend") != std::string::npos);
    CHECK_THROWS_WITH(recipes::place_on_available_gpus(1, /*soft=*/false),
                      Catch::Contains("GPUs were requested but none is available"));
    CHECK(recipes::place_on_available_gpus(2, /*soft=*/true).used == 0);
  }
}
