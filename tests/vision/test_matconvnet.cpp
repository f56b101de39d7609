// io/matconvnet.hpp (the reader the style transfer uses): MatConvNet .mat files written here through matio
// (v5 compressed and v7.3/HDF5) with random VGG-19-shaped weights, read back;
// MATLAB's column-major order checked with raw matio; and every way a file
// can be wrong: truncated, not a .mat file, no `layers`, a DagNN struct
// array, too few layers, a renamed layer, a missing field, mis-shaped biases,
// filters that do not fit the network.
#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/vgg19.hpp>
#include <cifarnet/io/matconvnet.hpp>

#include <filesystem>

#include "io/io_test_util.hpp"
#include "instances/vgg19.hpp"

using namespace cifarnet;
using namespace cifarnet::io;
using iotest::message_of;
using iotest::TempDir;

namespace {
const char* version_name(MatVersion v) { return v == MatVersion::V5 ? "v5" : "v7.3"; }

std::size_t conv_position(const std::string& name) {
  const auto& names = vgg19_mat_layer_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return i;
  FAIL("no layer " << name);
  return 0;
}
}  // namespace

TEST_CASE("A VGG-19-shaped .mat file round-trips every conv layer, v5 and v7.3", "[vision][mat]") {
  TempDir dir;
  const auto specs = random_vgg19_layers(16, 11);
  REQUIRE(specs.size() == 43);
  for (auto v : {MatVersion::V5, MatVersion::V73}) {
    INFO(version_name(v));
    const std::string path = dir / (std::string("vgg_") + version_name(v) + ".mat");
    write_matconvnet(path, specs, v);
    const auto convs = read_vgg19_mat(path);
    REQUIRE(convs.size() == 16);
    for (const auto& c : convs) {
      const MatLayerSpec& s = specs[conv_position(c.name)];
      INFO(c.name);
      CHECK(c.index == int(conv_position(c.name)));
      CHECK(std::vector<std::size_t>(c.shape.begin(), c.shape.end()) == s.filter_shape);
      CHECK(c.weights == s.filters);
      CHECK(c.bias == s.biases);
    }
    const auto listing = list_matconvnet(path);
    REQUIRE(listing.size() == 43);
    CHECK(listing[4].name == "pool1");
    CHECK(listing[4].type == "pool");
    CHECK(listing[4].filter_shape.empty());
    CHECK(listing[2].filter_shape == std::vector<std::size_t>{3, 3, 4, 4});
    CHECK(listing[2].bias_shape == std::vector<std::size_t>{1, 4});
  }
}

TEST_CASE("Filters are stored column-major H x W x Cin x Cout as MATLAB does (checked with raw matio)",
          "[vision][mat]") {
  TempDir dir;
  const auto specs = random_vgg19_layers(16, 3);
  const std::string path = dir / "a.mat";
  write_matconvnet(path, specs, MatVersion::V5);
  mat_t* mat = Mat_Open(path.c_str(), MAT_ACC_RDONLY);
  REQUIRE(mat);
  matvar_t* layers = Mat_VarRead(mat, "layers");
  REQUIRE(layers);
  CHECK(layers->class_type == MAT_C_CELL);
  matvar_t* conv1_2 = Mat_VarGetCell(layers, 2);
  REQUIRE(conv1_2);
  matvar_t* w = Mat_VarGetCell(Mat_VarGetStructFieldByName(conv1_2, "weights", 0), 0);
  REQUIRE(w);
  REQUIRE(w->rank == 4);
  CHECK(w->class_type == MAT_C_SINGLE);
  const std::size_t H = w->dims[0], W = w->dims[1], Ci = w->dims[2], Co = w->dims[3];
  CHECK(H == 3);
  CHECK(Ci == 4);
  CHECK(Co == 4);
  const float* cm = static_cast<const float*>(w->data);
  const auto& rm = specs[2].filters;
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t x = 0; x < W; ++x)
      for (std::size_t ci = 0; ci < Ci; ++ci)
        for (std::size_t co = 0; co < Co; ++co)
          CHECK(cm[h + H * (x + W * (ci + Ci * co))] == rm[((h * W + x) * Ci + ci) * Co + co]);
  Mat_VarFree(layers);
  Mat_Close(mat);
}

TEST_CASE("load_vgg19_mat fills a width-divided VGG-19 model, and refuses filters of another width",
          "[vision][mat]") {
  TempDir dir;
  const auto specs = random_vgg19_layers(32, 5);
  write_matconvnet(dir / "w32.mat", specs);
  Model<Vgg19FullFeatures<32>, backend::Reference, double> full({3, 24, 24}, DataFormat::NHWC);
  CHECK(full.output_shape(1) == Shape{1, 16, 1, 1});  // 24 -> 12 -> 6 -> 3 -> 2 -> 1 through five SAME pools
  load_vgg19_mat(full, dir / "w32.mat");
  const auto& P = full.parameters();
  for (const char* name : {"conv1_1", "conv3_2", "conv5_1", "conv5_4"}) {
    const MatLayerSpec& s = specs[conv_position(name)];
    const double* w = P.value(P.id(std::string(name) + "/weights"));
    const double* b = P.value(P.id(std::string(name) + "/biases"));
    CHECK(std::vector<double>(w, w + s.filters.size()) ==
          std::vector<double>(s.filters.begin(), s.filters.end()));
    CHECK(std::vector<double>(b, b + s.biases.size()) ==
          std::vector<double>(s.biases.begin(), s.biases.end()));
  }
  // The scipy golden file has channel counts / 64: conv1_1 is 3x3x3x1, the network wants 3x3x3x2.
  Model<Vgg19Features<32>, backend::Reference, double> narrow({3, 24, 24}, DataFormat::NHWC);
  const std::string m = message_of<ShapeError>(
      [&] { load_vgg19_mat(narrow, CIFARNET_TEST_DATA_DIR "/vision/vgg19_tiny_scipy.mat"); });
  CHECK_THAT(m, Catch::Contains("conv1_1") && Catch::Contains("3x3x3x1") && Catch::Contains("3x3x3x2"));
}

TEST_CASE("A renamed layer, a missing field or mis-shaped biases are reported by layer and field",
          "[vision][mat]") {
  TempDir dir;
  const std::string path = dir / "bad.mat";
  auto specs = random_vgg19_layers(32, 1);
  specs[5].name = "conv2_x";
  write_matconvnet(path, specs);
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(path); }),
             Catch::Contains("index 5 is named 'conv2_x', expected 'conv2_1'") && Catch::Contains("bad.mat"));

  specs = random_vgg19_layers(32, 1);
  specs[10].has_weights = false;
  write_matconvnet(path, specs);
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(path); }),
             Catch::Contains("layer 'conv3_1' (0-based index 10) has no field 'weights'"));
  // Only the layers asked for are read: conv1_1 alone still loads.
  CHECK(read_vgg19_mat(path, {"conv1_1"}).size() == 1);

  specs = random_vgg19_layers(32, 1);
  specs[21].has_name = false;
  write_matconvnet(path, specs, MatVersion::V73);
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(path); }),
             Catch::Contains("index 21 (expected 'conv4_2') has no field 'name'"));

  specs = random_vgg19_layers(32, 1);
  specs[7].biases.pop_back();
  specs[7].bias_shape = {1, specs[7].biases.size()};
  write_matconvnet(path, specs);
  CHECK_THAT(
      message_of<DataError>([&] { read_vgg19_mat(path); }),
      Catch::Contains("layer 'conv2_2'") && Catch::Contains("weights{2} (biases) is 1x3, expected 4 values"));

  specs = random_vgg19_layers(32, 1);
  specs.resize(10);
  write_matconvnet(path, specs);
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(path); }),
             Catch::Contains("'layers' has 10 entries; layer 'conv3_1' at index 10"));
  CHECK_THROWS_AS(read_vgg19_mat(path, {"fc6"}), ConfigError);
}

TEST_CASE("Missing, foreign and truncated .mat files are IoError or DataError naming the file",
          "[vision][mat]") {
  TempDir dir;
  CHECK_THAT(message_of<IoError>([&] { read_vgg19_mat(dir / "imagenet-vgg-verydeep-19.mat"); }),
             Catch::Contains("imagenet-vgg-verydeep-19.mat"));
  CHECK_THROWS_AS(read_vgg19_mat(dir.path()), IoError);

  iotest::write_bytes(dir / "text.mat", std::vector<std::uint8_t>(300, 'x'));
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(dir / "text.mat"); }),
             Catch::Contains("text.mat") && Catch::Contains("not a MATLAB .mat file"));

  {  // A valid file without `layers`.
    mat_t* mat = Mat_CreateVer((dir / "other.mat").c_str(), nullptr, MAT_FT_MAT5);
    REQUIRE(mat);
    double v = 1;
    std::size_t d[2] = {1, 1};
    matvar_t* var = Mat_VarCreate("foo", MAT_C_DOUBLE, MAT_T_DOUBLE, 2, d, &v, 0);
    Mat_VarWrite(mat, var, MAT_COMPRESSION_NONE);
    Mat_VarFree(var);
    Mat_Close(mat);
  }
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(dir / "other.mat"); }),
             Catch::Contains("has no variable 'layers' (variables: foo)"));

  {  // MatConvNet's DagNN format: `layers` is a struct array.
    mat_t* mat = Mat_CreateVer((dir / "dag.mat").c_str(), nullptr, MAT_FT_MAT5);
    REQUIRE(mat);
    const char* fields[] = {"name", nullptr};
    std::size_t d[2] = {1, 1};
    matvar_t* s = Mat_VarCreateStruct2("layers", 2, d, fields);
    Mat_VarWrite(mat, s, MAT_COMPRESSION_NONE);
    Mat_VarFree(s);
    Mat_Close(mat);
  }
  CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(dir / "dag.mat"); }), Catch::Contains("DagNN"));

  for (auto v : {MatVersion::V5, MatVersion::V73}) {
    const std::string full = dir / "full.mat";
    write_matconvnet(full, random_vgg19_layers(32, 2), v);
    const std::vector<std::uint8_t> bytes = iotest::read_bytes(full);
    for (double frac : {0.0, 0.05, 0.3, 0.6, 0.9, 0.999}) {
      const std::size_t keep = std::size_t(frac * double(bytes.size()));
      iotest::write_bytes(dir / "cut.mat",
                          std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + long(keep)));
      INFO(version_name(v) << " truncated to " << keep << " of " << bytes.size() << " bytes");
      CHECK_THAT(message_of<DataError>([&] { read_vgg19_mat(dir / "cut.mat"); }), Catch::Contains("cut.mat"));
    }
  }
}

TEST_CASE("A compressed v5 file written by scipy (not matio) reads with the real file's field sets",
          "[vision][mat]") {
  // tests/data/vision/make_golden.py: channel counts / 64, filters (L + 1) + 0.001·k (row-major flat index
  // k), biases −(L + 1) − 0.01·j, L the 0-based layer index.
  const std::string path = CIFARNET_TEST_DATA_DIR "/vision/vgg19_tiny_scipy.mat";
  const auto convs = read_vgg19_mat(path);
  REQUIRE(convs.size() == 16);
  for (const auto& c : convs) {
    INFO(c.name);
    const auto& spec = vgg19_convs()[std::size_t(&c - convs.data())];
    CHECK(c.shape[2] == std::size_t(spec.in == 3 ? 3 : spec.in / 64));
    CHECK(c.shape[3] == std::size_t(spec.out / 64));
    REQUIRE(c.weights.size() == 9 * c.shape[2] * c.shape[3]);
    for (std::size_t k = 0; k < c.weights.size(); ++k)
      CHECK(c.weights[k] == float(double(c.index + 1) + 0.001 * double(k)));
    for (std::size_t j = 0; j < c.bias.size(); ++j)
      CHECK(c.bias[j] == float(-double(c.index + 1) - 0.01 * double(j)));
  }
  const auto listing = list_matconvnet(path);
  REQUIRE(listing.size() == 43);
  CHECK(listing[36].name == "pool5");
  CHECK(listing[36].type == "pool");
  CHECK(listing[42].type == "softmax");
}

namespace {
std::vector<std::string>& program_log() {
  static std::vector<std::string> log;
  return log;
}
void program_handler(int, char* message) { program_log().emplace_back(message ? message : ""); }
bool program_saw(const std::string& text) {
  for (const auto& m : program_log())
    if (m.find(text) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("matio's log handler is cifarnet's only while a read or write runs, and the program's after it",
          "[vision][mat]") {
  TempDir dir;
  program_log().clear();
  set_matio_log_handler("test", &program_handler);
  Mat_Warning("%s", "before any read");
  CHECK(program_saw("before any read"));
  {
    MatioLogScope outer;
    {
      MatioLogScope inner;  // nested scopes: only the outermost puts the handler back
    }
    Mat_Warning("%s", "during a read");
    CHECK_THAT(io::detail::matio_log(), Catch::Contains("during a read"));
  }
  CHECK_FALSE(program_saw("during a read"));
  Mat_Warning("%s", "after a scope");
  CHECK(program_saw("after a scope"));

  // A read and a write that succeed, and one that fails with an exception.
  write_matconvnet(dir / "ok.mat", random_vgg19_layers(32, 1));
  CHECK(read_vgg19_mat(dir / "ok.mat", {"conv1_1"}).size() == 1);
  iotest::write_bytes(dir / "text.mat", std::vector<std::uint8_t>(300, 'x'));
  CHECK_THROWS_AS(read_vgg19_mat(dir / "text.mat"), DataError);
  Mat_Warning("%s", "after the reads");
  CHECK(program_saw("after the reads"));

  set_matio_log_handler("", nullptr);  // matio's default again for the other cases
}
