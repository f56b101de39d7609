// io::save / io::load (io/save_load.hpp): a model, a model with its
// optimizer, a trainer; bit-exact round trips, strict and lenient loads.
#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/io/save_load.hpp>
#include <cifarnet/optim/momentum.hpp>
#include <cifarnet/train/trainer.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "io_test_util.hpp"

using namespace cifarnet;
using Catch::Matchers::Contains;

namespace {

// Two small conv nets with batch norm, and one with a third convolution.
using Net2 = Sequential<Conv2d<3, 4, 3>, BatchNorm2d<4, FusedRelu>,
                        Conv2d<4, 4, 3, 1, Padding::Same, WithBias>, GlobalAvgPool, Dense<4, 3>>;
using Net3 =
    Sequential<Conv2d<3, 4, 3>, BatchNorm2d<4, FusedRelu>, Conv2d<4, 4, 3, 1, Padding::Same, WithBias>,
               Conv2d<4, 4, 3, 1, Padding::Same, WithBias>, GlobalAvgPool, Dense<4, 3>>;
// Net2 with its dense layer as a 1x1 convolution named head (parameter head/weights).
CIFARNET_NAME(head);
using Net2Conv =
    Sequential<Conv2d<3, 4, 3>, BatchNorm2d<4, FusedRelu>, Conv2d<4, 4, 3, 1, Padding::Same, WithBias>,
               Named<head, Conv2d<4, 3, 1>>, GlobalAvgPool>;

// Net2 with a 1x1 convolution where Net3 has its 3x3 conv3.
using Net2Mismatch = Sequential<Conv2d<3, 4, 3>, BatchNorm2d<4, FusedRelu>,
                                Conv2d<4, 4, 3, 1, Padding::Same, WithBias>, Conv2d<4, 3, 1>, GlobalAvgPool>;

template <class Net>
using M = Model<Net, backend::Reference, float>;
const InputShape kInput{3, 6, 6};

Tensor<float> input(std::size_t n, std::uint64_t seed) {
  Tensor<float> x = make_tensor<float>({n, 3, 6, 6}, DataFormat::NCHW);
  Rng rng(seed);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform(-1, 1));
  return x;
}

/// A forward in Mode::Train moves batch norm's moving statistics off their
/// initial values, so that the state buffer is part of what is compared.
template <class Model>
void move_statistics(Model& m) {
  const Tensor<float> x = input(4, 99);
  m.forward(x, Mode::Train);
}

bool same_bits(const Parameters<float>& a, const Parameters<float>& b) {
  return a.values().size() == b.values().size() && a.state().size() == b.state().size() &&
         std::memcmp(a.values().data(), b.values().data(), sizeof(float) * std::size_t(a.values().size())) ==
             0 &&
         std::memcmp(a.state().data(), b.state().data(), sizeof(float) * std::size_t(a.state().size())) == 0;
}

/// The first parameter whose value (or state) differs, for messages.
std::string first_difference(const Parameters<float>& a, const Parameters<float>& b) {
  for (std::size_t id = 0; id < a.count(); ++id) {
    const auto& info = a.info(id);
    if (std::memcmp(a.value(id), b.value(b.id(info.name)), sizeof(float) * info.size) != 0) return info.name;
  }
  return "none";
}

std::vector<float> copy_values(const Parameters<float>& p) {
  return std::vector<float>(p.values().data(), p.values().data() + p.values().size());
}

/// One momentum step with the gradients of the model's loss on `x`.
template <class Model>
void sgd_step(Model& m, optim::Momentum<float>& opt, std::uint64_t seed) {
  const Tensor<float> x = input(4, seed);  // alive until backward, which reads it
  const Tensor<float>& y = m.forward(x, Mode::Train);
  Tensor<float> dlogits;
  softmax_cross_entropy(y, std::vector<std::int32_t>{0, 1, 2, 1}, &dlogits);
  m.backward(dlogits);
  opt.step(m.parameters(), 0.1);
}

}  // namespace

TEST_CASE("io::save and io::load round-trip a conv net bit for bit", "[io][save_load]") {
  iotest::TempDir dir;
  const std::string path = dir / "net.safetensors";
  M<Net2> a(kInput, DataFormat::NCHW, {}, 1);
  move_statistics(a);
  io::save(a, path);

  M<Net2> b(kInput, DataFormat::NCHW, {}, 2);
  REQUIRE_FALSE(same_bits(a.parameters(), b.parameters()));
  const io::LoadReport r = io::load(b, path);
  CHECK(r.loaded.size() == a.parameters().count());
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  CHECK(same_bits(a.parameters(), b.parameters()));

  // The same predictions, and saving the loaded model writes the same bytes.
  const Tensor<float> x = input(3, 5);
  const Tensor<float> ya = a.forward(x, Mode::Infer);
  const Tensor<float>& yb = b.forward(x, Mode::Infer);
  CHECK(std::memcmp(ya.data(), yb.data(), sizeof(float) * ya.size()) == 0);
  io::save(b, dir / "again.safetensors");
  CHECK(iotest::read_bytes(dir / "again.safetensors") == iotest::read_bytes(path));
  // Parameters and batch norm's moving statistics, by their names.
  const StateDict d = io::read_safetensors(path);
  CHECK(d.size() == a.parameters().count());
  CHECK(d.contains("conv1/weights"));
  CHECK(d.contains("bn1/moving_variance"));
}

TEST_CASE("a strict load refuses a checkpoint of another network, naming the tensors the model lacks",
          "[io][save_load][strict]") {
  iotest::TempDir dir;
  const std::string path = dir / "three_convs.safetensors";
  M<Net3> three(kInput, DataFormat::NCHW, {}, 1);
  io::save(three, path);

  M<Net2> two(kInput, DataFormat::NCHW, {}, 2);
  const auto before = copy_values(two.parameters());
  // Net3's conv3 is Net2's missing layer; Net3's dense1 sits where Net2's does.
  CHECK(
      iotest::message_of<DataError>([&] { io::load(two, path); }) ==
      "cifarnet: '" + path +
          "' has 2 unexpected tensors (no parameter has that name): 'conv3/biases' [4], 'conv3/weights' [3, "
          "3, 4, 4] (strict = false loads the rest and reports them)");
  CHECK(copy_values(two.parameters()) == before);  // nothing changed

  SECTION("missing and unexpected together") {
    M<Net2Conv> other(kInput, DataFormat::NCHW, {}, 3);
    CHECK(iotest::message_of<DataError>([&] { io::load(other, path); }) ==
          "cifarnet: '" + path +
              "' is missing 1 parameter: 'head/weights' [1, 1, 4, 3]; it has 4 unexpected tensors (no "
              "parameter has that name): 'conv3/biases' [4], 'conv3/weights' [3, 3, 4, 4], 'dense1/biases' "
              "[3], 'dense1/weights' [4, 3] (strict = false loads the rest and reports them)");
  }
  SECTION("low level: load_parameters on the dict is as strict") {
    const StateDict d = io::read_safetensors(path);
    CHECK_THAT(iotest::message_of<DataError>([&] { io::load_parameters(two.parameters(), d); }),
               Contains("2 unexpected tensors"));
    io::LoadOptions whole;  // a dict that holds other state: its owners load that
    whole.ignore_unexpected = true;
    const auto r = io::load_parameters(two.parameters(), d, whole);
    CHECK(r.unexpected.empty());
    CHECK(r.loaded.size() == two.parameters().count());
  }
}

TEST_CASE("a lenient load (strict = false) loads what fits and reports the missing and the unexpected",
          "[io][save_load][strict]") {
  iotest::TempDir dir;
  const std::string path = dir / "three_convs.safetensors";
  M<Net3> three(kInput, DataFormat::NCHW, {}, 1);
  move_statistics(three);
  io::save(three, path);

  M<Net2Conv> other(kInput, DataFormat::NCHW, {}, 3);
  const auto& P = other.parameters();
  const auto id = P.id("head/weights");
  const std::vector<float> kept(P.value(id), P.value(id) + P.info(id).size);
  io::LoadOptions lenient;
  lenient.strict = false;
  const io::LoadReport r = io::load(other, path, lenient);
  CHECK(r.missing == std::vector<std::string>{"head/weights"});
  CHECK(r.unexpected ==
        std::vector<std::string>{"conv3/biases", "conv3/weights", "dense1/biases", "dense1/weights"});
  CHECK(r.loaded.size() == P.count() - 1);
  CHECK(std::vector<float>(P.value(id), P.value(id) + P.info(id).size) == kept);
  for (const char* name :
       {"conv1/weights", "bn1/gamma", "bn1/moving_mean", "conv2/weights", "conv2/biases"}) {
    const auto& Q = three.parameters();
    const auto i = P.id(name), j = Q.id(name);
    INFO(name);
    CHECK(std::vector<float>(P.value(i), P.value(i) + P.info(i).size) ==
          std::vector<float>(Q.value(j), Q.value(j) + Q.info(j).size));
  }
}

TEST_CASE("a shape mismatch is an error even in a lenient load, and changes nothing",
          "[io][save_load][strict]") {
  iotest::TempDir dir;
  const std::string path = dir / "three_convs.safetensors";
  M<Net3> three(kInput, DataFormat::NCHW, {}, 1);
  io::save(three, path);
  M<Net2Mismatch> other(kInput, DataFormat::NCHW, {}, 3);
  const auto before = copy_values(other.parameters());
  io::LoadOptions lenient;
  lenient.strict = false;
  CHECK(iotest::message_of<ShapeError>([&] { io::load(other, path, lenient); }) ==
        "cifarnet: parameter 'conv3/weights' has shape [1, 1, 4, 3] but tensor 'conv3/weights' in '" + path +
            "' has shape [3, 3, 4, 4]");
  CHECK(copy_values(other.parameters()) == before);
}

TEST_CASE("io::save(model, optimizer) and io::load resume a momentum run bit for bit",
          "[io][save_load][resume]") {
  iotest::TempDir dir;
  const std::string path = dir / "resume.safetensors";
  M<Net2> a(kInput, DataFormat::NCHW, {}, 1);
  optim::Momentum<float> opt_a(a.parameters(), optim::MomentumOptions().momentum(0.9));
  for (std::uint64_t s = 0; s < 3; ++s) sgd_step(a, opt_a, 10 + s);
  io::save(a, opt_a, path);
  CHECK(io::read_safetensors(path).contains("conv1/weights/Momentum"));

  M<Net2> b(kInput, DataFormat::NCHW, {}, 2);
  optim::Momentum<float> opt_b(b.parameters(), optim::MomentumOptions().momentum(0.9));
  const io::LoadReport r = io::load(b, opt_b, path);
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  CHECK(same_bits(a.parameters(), b.parameters()));
  CHECK(optim::state_dict(opt_a) == optim::state_dict(opt_b));
  // The next step is the same on both: the accumulators came back.
  sgd_step(a, opt_a, 20);
  sgd_step(b, opt_b, 20);
  INFO("first difference: " << first_difference(a.parameters(), b.parameters()));
  CHECK(same_bits(a.parameters(), b.parameters()));

  SECTION("a file without the slots: strict refuses it and changes nothing; lenient lists the slots") {
    const std::string bare = dir / "bare.safetensors";
    io::save(a, bare);
    M<Net2> c(kInput, DataFormat::NCHW, {}, 3);
    optim::Momentum<float> opt_c(c.parameters(), optim::MomentumOptions().momentum(0.9));
    const auto before = copy_values(c.parameters());
    CHECK(iotest::message_of<DataError>([&] { io::load(c, opt_c, bare); }) ==
          "cifarnet: '" + bare + "' has no state tensor 'conv1/weights/Momentum' [3, 3, 3, 4]");
    CHECK(copy_values(c.parameters()) == before);
    io::LoadOptions lenient;
    lenient.strict = false;
    const auto rl = io::load(c, opt_c, bare, lenient);
    CHECK(rl.missing.size() == optim::state_dict(opt_c).size());  // one slot per trainable parameter
    CHECK(rl.missing.front() == "conv1/weights/Momentum");
    CHECK(copy_values(c.parameters()) == copy_values(a.parameters()));
  }
  SECTION("the slots file into a model alone: the slots are unexpected") {
    M<Net2> c(kInput, DataFormat::NCHW, {}, 3);
    CHECK_THAT(iotest::message_of<DataError>([&] { io::load(c, path); }),
               Contains("unexpected tensors (no parameter has that name): 'bn1/beta/Momentum' [4]"));
  }
}

TEST_CASE("io::save(trainer) and io::load(trainer) resume a Trainer exactly and refuse extra tensors",
          "[io][save_load][resume][train]") {
  iotest::TempDir dir;
  const std::string path = dir / "trainer.safetensors";
  auto batch = [](std::uint64_t seed) {
    train::Batch b;
    b.images = input(4, seed);
    b.labels = {2, 0, 1, 1};
    return b;
  };
  M<Net2> a(kInput, DataFormat::NCHW, {}, 1);
  optim::Momentum<float> opt_a(a.parameters(), optim::MomentumOptions().momentum(0.9));
  train::Trainer<M<Net2>> ta(a, train::TrainerOptions().max_steps(100));
  ta.set_optimizer(opt_a, [](std::int64_t s) { return s < 3 ? 0.1 : 0.01; });
  for (std::uint64_t s = 0; s < 3; ++s) ta.step(batch(s));
  io::save(ta, path);

  M<Net2> b(kInput, DataFormat::NCHW, {}, 2);
  optim::Momentum<float> opt_b(b.parameters(), optim::MomentumOptions().momentum(0.9));
  train::Trainer<M<Net2>> tb(b, train::TrainerOptions().max_steps(100));
  tb.set_optimizer(opt_b, [](std::int64_t s) { return s < 3 ? 0.1 : 0.01; });
  CHECK(io::load(tb, path) == 3);
  CHECK(tb.global_step() == 3);
  CHECK(same_bits(a.parameters(), b.parameters()));
  ta.step(batch(7));
  tb.step(batch(7));
  CHECK(same_bits(a.parameters(), b.parameters()));

  SECTION("a file with a tensor the trainer does not save is refused before anything changes") {
    StateDict d = io::read_safetensors(path);
    d.set<float>("conv9/weights", {2}, {1.0f, 2.0f});
    const std::string extra = dir / "extra.safetensors";
    io::write_safetensors(extra, d);
    const auto before = copy_values(b.parameters());
    CHECK(iotest::message_of<DataError>([&] { io::load(tb, extra); }) ==
          "cifarnet: '" + extra +
              "' has 1 unexpected tensor (the trainer saves none of that name): 'conv9/weights' [2]");
    CHECK(copy_values(b.parameters()) == before);
    CHECK(tb.global_step() == 4);
  }
  SECTION("a model-only file lacks the slots and the step") {
    const std::string bare = dir / "bare.safetensors";
    io::save(a, bare);
    CHECK_THAT(iotest::message_of<DataError>([&] { io::load(tb, bare); }),
               Contains("' is missing 8 tensors the trainer saves: 'bn1/beta/Momentum' [4], "));
  }
}

TEST_CASE("io::save and io::load errors name the file", "[io][save_load][errors]") {
  iotest::TempDir dir;
  M<Net2> a(kInput, DataFormat::NCHW, {}, 1);
  const std::string nowhere = dir / "no/such/dir/net.safetensors";
  CHECK_THAT(iotest::message_of<IoError>([&] { io::save(a, nowhere); }),
             Contains("cifarnet: cannot write '" + nowhere + "'"));
  CHECK(iotest::list_dir(dir.path()).empty());
  const std::string absent = dir / "absent.safetensors";
  CHECK_THAT(iotest::message_of<IoError>([&] { io::load(a, absent); }),
             Contains("cannot open '" + absent + "'"));
  // A save over an existing file replaces it whole (a temporary file renamed
  // over it), and a file that is not safetensors is a DataError naming it.
  const std::string path = dir / "net.safetensors";
  iotest::write_bytes(path, {1, 2, 3});
  CHECK_THAT(iotest::message_of<DataError>([&] { io::load(a, path); }), Contains("'" + path + "'"));
  io::save(a, path);
  CHECK(io::load(a, path).loaded.size() == a.parameters().count());
  CHECK(iotest::list_dir(dir.path()) == std::vector<std::string>{"net.safetensors"});
}
