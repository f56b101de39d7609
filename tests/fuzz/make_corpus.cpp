// tests/fuzz/make_corpus.cpp — writes the seed corpora under
// tests/fuzz/corpus/<target>/: small valid files made by cifarnet's own
// writers (and, for an uncompressed .mat, by matio from the library's file).
// Deterministic (fixed seeds). Built with -DCIFARNET_FUZZ=ON as
// fuzz_make_corpus; run: fuzz_make_corpus <repo>/tests/fuzz/corpus
#include <matio.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cifarnet/core/rng.hpp"
#include "cifarnet/data/cifar.hpp"
#include "cifarnet/data/example.hpp"
#include "cifarnet/data/tfrecord.hpp"
#include "cifarnet/io/checkpoint.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/io/image.hpp"
#include "cifarnet/io/safetensors.hpp"
#include "cifarnet/io/tfevents.hpp"
#include "cifarnet/io/tfrecord.hpp"
#include "cifarnet/io/matconvnet.hpp"

using namespace cifarnet;
namespace fs = std::filesystem;

namespace {
fs::path root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  io::write_file_atomic((root / target / name).string(), bytes.data(), bytes.size(), false);
  std::printf("%s/%s: %zu bytes\n", target.c_str(), name.c_str(), bytes.size());
}
void put(const std::string& target, const std::string& name, const std::vector<std::uint8_t>& b) {
  put(target, name, std::string(b.begin(), b.end()));
}
std::string slurp(const std::string& path) {
  const auto b = io::read_file(path);
  return std::string(b.begin(), b.end());
}
std::vector<std::uint8_t> random_bytes(Rng& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& x : v) x = static_cast<std::uint8_t>(rng.uniform_int(256));
  return v;
}

void cifar(Rng& rng) {
  std::string c10, c100;
  for (int i = 0; i < 2; ++i) {
    const auto px = random_bytes(rng, 3072);
    c10 += char(3 + i);
    c10.append(px.begin(), px.end());
    c100 += char(7 + i);
    c100 += char(42 + i);
    c100.append(px.begin(), px.end());
  }
  put("cifar", "cifar10_two_records.bin", c10);
  put("cifar", "cifar100_two_records.bin", c100);
  put("cifar", "batches.meta.txt",
      "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n");
}

data::Example generic_example() {
  data::Example ex;
  ex.features.emplace_back("name", data::Feature::of_bytes("cat"));
  ex.features.emplace_back("scores", data::Feature::of_floats({0.5f, -1.25f, 3.0e-7f}));
  data::Feature ids;
  ids.kind = data::Feature::Kind::int64_list;
  ids.int64s = {0, 1, -1, 1LL << 40};
  ex.features.emplace_back("ids", ids);
  data::Feature many;
  many.kind = data::Feature::Kind::bytes_list;
  many.bytes = {"a", "", "xyz"};
  ex.features.emplace_back("many", many);
  ex.features.emplace_back("empty", data::Feature{});
  return ex;
}

void tfrecord_and_example(Rng& rng) {
  const auto px = random_bytes(rng, 3072);
  const std::string cifar_ex = data::encode_cifar_example(px.data(), px.size(), 6);
  const std::string generic = data::serialize(generic_example());
  put("example", "cifar_example.pb", cifar_ex);
  put("example", "generic_example.pb", generic);
  std::string small;
  io::frame_record(small, generic);
  io::frame_record(small, "");
  put("tfrecord", "generic_and_empty.tfrecord", small);
  // Two CIFAR images as the seed's generate_cifar10_tfrecords.py writes them.
  data::ImageSet set;
  set.num_classes = 10;
  set.pixels = random_bytes(rng, 2 * 3072);
  set.labels = {1, 9};
  const std::string tmp = (root / ".tmp.tfrecord").string();
  data::write_cifar_tfrecords(set, tmp);
  put("tfrecord", "cifar_two_images.tfrecord", slurp(tmp));
  fs::remove(tmp);
}

void safetensors() {
  cifarnet::StateDict d;
  d.set("conv1/weights", {2, 2, 1, 2}, std::vector<float>{1, -2, 3.5f, 0, 1e-3f, 7, -8, 9});
  d.set("dense/biases", {3}, std::vector<double>{0.25, -0.5, 1});
  io::set_global_step(d, 1234);
  d.set("bn/moving_mean",
        cifarnet::TensorData::from<cifarnet::bf16>({2}, std::vector<cifarnet::bf16>{{0x3f80}, {0xc000}}));
  d.set("half",
        cifarnet::TensorData::from<cifarnet::f16>({1, 2}, std::vector<cifarnet::f16>{{0x3c00}, {0x0001}}));
  d.set("mask", cifarnet::TensorData::raw(cifarnet::Dtype::U8, {2, 2}, {0, 1, 1, 0}));
  io::set_rng_state(d, "data", Rng(7).state());
  d.metadata["pipeline/train"] = "epoch=3 position=17";
  put("safetensors", "checkpoint_with_checksums.safetensors", io::serialize_safetensors(d));
  io::WriteOptions plain;
  plain.checksums = false;
  put("safetensors", "checkpoint_plain.safetensors", io::serialize_safetensors(d, plain));
  cifarnet::StateDict empty;
  put("safetensors", "empty.safetensors", io::serialize_safetensors(empty, plain));
}

void checkpoint_index() {
  io::CheckpointIndex idx;
  idx.latest = "model.ckpt-300.safetensors";
  idx.all = {"model.ckpt-200.safetensors", "model.ckpt-300.safetensors"};
  put("checkpoint_index", "checkpoint", io::format_checkpoint_index(idx));
  idx.latest = "odd \"name\" \\ here.safetensors";
  idx.all = {idx.latest};
  put("checkpoint_index", "checkpoint_escaped", io::format_checkpoint_index(idx) + "\r\n\n");
}

void tfevents(Rng& rng) {
  std::string file;
  io::Event first;
  first.wall_time = 1700000000.5;
  first.file_version = "brain.Event:2";
  first.source_writer = "cifarnet";
  io::frame_record(file, io::encode_event(first));
  io::Event scalar;
  scalar.wall_time = 1700000001.25;
  scalar.step = 100;
  io::SummaryValue loss;
  loss.tag = "loss";
  loss.value = 2.3f;
  scalar.summary = std::vector<io::SummaryValue>{loss};
  io::frame_record(file, io::encode_event(scalar));
  io::Event histo = scalar;
  io::SummaryValue h;
  h.tag = "conv1/weights";
  io::HistogramProto hp;
  hp.min = -1;
  hp.max = 2;
  hp.num = 3;
  hp.sum = 1.5;
  hp.sum_squares = 5.25;
  hp.bucket_limit = {-0.5, 1.1, 2.2};
  hp.bucket = {1, 1, 1};
  h.value = hp;
  h.metadata = std::string("\x12\x0b\x0a\x09histogram", 13);
  histo.summary = std::vector<io::SummaryValue>{h};
  io::frame_record(file, io::encode_event(histo));
  io::Event image = scalar;
  io::SummaryValue im;
  im.tag = "input/image/0";
  const auto px = random_bytes(rng, 4 * 4 * 3);
  io::ImageSummary is;
  is.height = 4;
  is.width = 4;
  is.colorspace = 3;
  is.encoded = io::encode_png(px.data(), 4, 4, 3);
  im.value = is;
  image.summary = std::vector<io::SummaryValue>{im};
  io::frame_record(file, io::encode_event(image));
  put("tfevents", "events.out.tfevents.1700000000.fuzz", file);
}

void write_fn(void* ctx, void* data, int size) {
  static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), std::size_t(size));
}

void images(Rng& rng) {
  for (int c = 1; c <= 4; ++c) {
    const auto px = random_bytes(rng, std::size_t(5 * 3 * c));
    put("image", "rgb" + std::to_string(c) + ".png", io::encode_png(px.data(), 5, 3, c));
  }
  io::Image8 img(6, 5, 3);
  img.pixels = random_bytes(rng, img.size());
  put("image", "small.jpg", io::encode_jpeg(img, 90));
  std::string bmp;
  stbi_write_bmp_to_func(&write_fn, &bmp, 5, 6, 3, img.pixels.data());
  put("image", "small.bmp", bmp);
}

void matconvnet() {
  auto layers = io::random_vgg19_layers(64, 3);
  layers.resize(4);  // conv1_1, relu1_1, conv1_2, relu1_2
  const std::string compressed = (root / ".tmp-z.mat").string(), plain = (root / ".tmp.mat").string();
  io::write_matconvnet(compressed, layers, io::MatVersion::V5);
  put("matconvnet", "vgg19_first4_zlib.mat", slurp(compressed));
  // The same variable, uncompressed: structure the fuzzer can mutate directly.
  {
    mat_t* in = Mat_Open(compressed.c_str(), MAT_ACC_RDONLY);
    matvar_t* v = in ? Mat_VarRead(in, "layers") : nullptr;
    mat_t* out = Mat_CreateVer(plain.c_str(), nullptr, MAT_FT_MAT5);
    if (!v || !out || Mat_VarWrite(out, v, MAT_COMPRESSION_NONE) != 0) {
      std::fprintf(stderr, "matio could not rewrite the file uncompressed\n");
      std::exit(1);
    }
    Mat_VarFree(v);
    Mat_Close(in);
    Mat_Close(out);
  }
  put("matconvnet", "vgg19_first4_plain.mat", slurp(plain));
  fs::remove(compressed);
  fs::remove(plain);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
    return 2;
  }
  root = argv[1];
  Rng rng(20261122);
  cifar(rng);
  tfrecord_and_example(rng);
  safetensors();
  checkpoint_index();
  tfevents(rng);
  images(rng);
  matconvnet();
  return 0;
}
