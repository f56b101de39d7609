// The CUDA backend's host logic, which needs no GPU and so runs (never
// skips) on every machine that builds the backend: the environment
// (CIFARNET_CUDA_DEVICE, CIFARNET_CUDA_WORKSPACE_MB, the convolution
// options), the device a process takes from its MPI local rank, the choice
// of a convolution algorithm from cuDNN's measured list and its cache, the
// scoped device guard (over a counting stand-in of cudaGetDevice /
// cudaSetDevice), the typed kernel handles against the kernels' source, and
// Towers binding their own devices to a device-aware reducer.
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/models/resnet.hpp>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using namespace cifarnet;
namespace cu = cifarnet::backend::cuda;

namespace {

/// A fake environment: a table of variables.
struct Env {
  std::map<std::string, std::string> vars;
  const char* operator()(const char* name) const {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
};

}  // namespace

TEST_CASE("CIFARNET_CUDA_WORKSPACE_MB: a number of MiB, anything else a clear error naming it",
          "[backend][cuda][host]") {
  CHECK(cu::workspace_limit_bytes(nullptr) == cu::kDefaultWorkspaceBytes);
  CHECK(cu::workspace_limit_bytes("256") == (std::size_t(256) << 20));
  CHECK(cu::workspace_limit_bytes(" 0 ") == 0);
  for (const char* bad : {"", "abc", "12x", "-1", "1.5", "0x10", "99999999999999999999999"}) {
    INFO("value \"" << bad << "\"");
    CHECK_THROWS_AS(cu::workspace_limit_bytes(bad), ConfigError);
    CHECK_THROWS_WITH(cu::workspace_limit_bytes(bad), Catch::Contains("CIFARNET_CUDA_WORKSPACE_MB"));
  }
}

TEST_CASE("The device of a process: the user's CIFARNET_CUDA_DEVICE, else its local rank, else 0",
          "[backend][cuda][host]") {
  CHECK(cu::choose_device(4, Env{}).ordinal == 0);
  // One GPU per process of a node, from each launcher's local-rank variable.
  for (const char* var : cu::local_rank_variables()) {
    INFO(var);
    std::set<int> used;
    for (int rank = 0; rank < 4; ++rank)
      used.insert(cu::choose_device(4, Env{{{var, std::to_string(rank)}}}).ordinal);
    CHECK(used == std::set<int>{0, 1, 2, 3});
    // More processes than GPUs: round robin.
    CHECK(cu::choose_device(2, Env{{{var, "3"}}}).ordinal == 1);
  }
  // The user's explicit value wins over the local rank, on every rank.
  Env both{{{"CIFARNET_CUDA_DEVICE", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}}};
  const cu::DeviceChoice c = cu::choose_device(4, both);
  CHECK(c.ordinal == 1);
  CHECK(c.reason == "CIFARNET_CUDA_DEVICE");
  // No GPU: 0 (opening it is then the "no usable GPU" error).
  CHECK(cu::choose_device(0, Env{{{"SLURM_LOCALID", "3"}}}).ordinal == 0);
  // Not numbers: errors naming the variable.
  CHECK_THROWS_WITH(cu::choose_device(4, Env{{{"CIFARNET_CUDA_DEVICE", "gpu1"}}}),
                    Catch::Contains("CIFARNET_CUDA_DEVICE"));
  CHECK_THROWS_WITH(cu::choose_device(4, Env{{{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}}}),
                    Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK"));
}

TEST_CASE("Convolution options from the environment: TF32 and determinism are opt-in",
          "[backend][cuda][host]") {
  CHECK(cu::conv_options_from_env(Env{}) == cu::ConvOptions{});
  CHECK_FALSE(cu::ConvOptions{}.allow_tf32);
  CHECK_FALSE(cu::ConvOptions{}.deterministic);
  const cu::ConvOptions o =
      cu::conv_options_from_env(Env{{{"CIFARNET_CUDA_TF32", "1"}, {"CIFARNET_CUDA_DETERMINISTIC", "1"}}});
  CHECK(o.allow_tf32);
  CHECK(o.deterministic);
  CHECK_THROWS_WITH(cu::conv_options_from_env(Env{{{"CIFARNET_CUDA_TF32", "yes"}}}),
                    Catch::Contains("CIFARNET_CUDA_TF32"));
  CHECK_THROWS_WITH(cu::conv_options_from_env(Env{{{"CIFARNET_CUDA_DETERMINISTIC", "2"}}}),
                    Catch::Contains("CIFARNET_CUDA_DETERMINISTIC"));
}

TEST_CASE("The convolution algorithm: the fastest measured one that ran, fits, and obeys the options",
          "[backend][cuda][host]") {
  // Fastest first, as cuDNN's Find reports them.
  const std::vector<cu::AlgoCandidate> ranked = {
      {8, true, 1000, true, false, true},  // FFT or Winograd: its transforms round
      {7, false, 0, true, false},          // failed to run
      {6, true, 1 << 30, true, false},     // needs 1 GiB
      {5, true, 1000, false, true},        // TF32 tensor cores, not deterministic
      {4, true, 1000, false, false},       // fp32, not deterministic
      {3, true, 1000, true, true},         // TF32, deterministic
      {2, true, 1000, true, false},        // fp32, deterministic
  };
  const std::size_t limit = 1 << 20;
  auto algo = [&](cu::ConvOptions o) {
    const int i = cu::select_algorithm(ranked, limit, o);
    return i < 0 ? -1 : ranked[std::size_t(i)].algo;
  };
  CHECK(algo({false, false}) == 4);
  CHECK(algo({true, false}) == 5);
  CHECK(algo({false, true}) == 2);
  CHECK(algo({true, true}) == 3);
  CHECK(algo({false, false, true}) == 8);                                        // transforms allowed
  CHECK(cu::select_algorithm(ranked, std::size_t(1) << 31, {}) == 2);            // a large enough limit
  CHECK(cu::select_algorithm({{1, true, 1000, false, true}}, limit, {}) == -1);  // only TF32: none
  CHECK(cu::select_algorithm({}, limit, {}) == -1);
}

TEST_CASE("Convolution algorithms are measured once per device, geometry, options and limit",
          "[backend][cuda][host]") {
  cu::ConvAlgoCache cache;
  int runs = 0;
  auto measure = [&] {
    ++runs;
    cu::ConvAlgorithms a;
    a.fwd = runs;
    return a;
  };
  const ConvGeom g = ConvGeom::make(DataFormat::NCHW, {128, 16, 32, 32}, 16, 3, 1, Padding::Same);
  const cu::ConvAlgoKey k{0, g, {}, 1 << 20};
  CHECK(cache.get(k, measure).fwd == 1);
  CHECK(cache.get(k, measure).fwd == 1);  // a second layer of the same geometry: cached
  CHECK(runs == 1);
  cu::ConvAlgoKey other_batch = k;
  other_batch.geom = ConvGeom::make(DataFormat::NCHW, {100, 16, 32, 32}, 16, 3, 1, Padding::Same);
  cu::ConvAlgoKey nhwc = k;
  nhwc.geom.fmt = DataFormat::NHWC;
  cu::ConvAlgoKey other_device = k;
  other_device.device = 1;
  cu::ConvAlgoKey det = k;
  det.opts.deterministic = true;
  cu::ConvAlgoKey tf32 = k;
  tf32.opts.allow_tf32 = true;
  cu::ConvAlgoKey small = k;
  small.workspace_limit = 0;
  int expected = 1;
  for (const auto& key : {other_batch, nhwc, other_device, det, tf32, small}) {
    CHECK(cache.get(key, measure).fwd == ++expected);
    CHECK(cache.get(key, measure).fwd == expected);
  }
  CHECK(runs == expected);
  CHECK(cache.measured() == std::size_t(expected));
  CHECK(cache.get(k, measure).fwd == 1);
}

namespace {
// A stand-in of the CUDA runtime's per-thread current device.
struct FakeDevices {
  static inline int current = 0;
  static inline int sets = 0;
  static inline bool fail_set = false;
  static int get(int* d) {
    *d = current;
    return 0;
  }
  static int set(int d) {
    if (fail_set) return 1;
    ++sets;
    current = d;
    return 0;
  }
};
using Guard = cu::BasicDeviceGuard<FakeDevices>;
}  // namespace

TEST_CASE("The device guard makes a device current for a scope and restores the caller's",
          "[backend][cuda][host]") {
  FakeDevices::current = 0;
  FakeDevices::sets = 0;
  FakeDevices::fail_set = false;
  {
    const Guard g(1);  // a model on GPU 1 driven from a thread on GPU 0
    CHECK(FakeDevices::current == 1);
    {
      const Guard inner(1);  // already current: no call
      CHECK(FakeDevices::sets == 1);
    }
    CHECK(FakeDevices::current == 1);
  }
  CHECK(FakeDevices::current == 0);
  CHECK(FakeDevices::sets == 2);
  // Restored when the op throws.
  try {
    const Guard g(3);
    throw std::runtime_error("op failed");
  } catch (const std::runtime_error&) {
  }
  CHECK(FakeDevices::current == 0);
  // A switch that fails is an error, not a silent run on the wrong GPU.
  FakeDevices::fail_set = true;
  CHECK_THROWS_AS(Guard(2), BackendError);
  FakeDevices::fail_set = false;
  CHECK(FakeDevices::current == 0);
}

TEST_CASE("Every kernel has a typed handle whose parameter types are the source's declaration",
          "[backend][cuda][host][kernels]") {
  const std::string src = cu::kernel_detail::kernel_source();
  const auto handles = cu::kernel::all();
  std::set<std::string> named;
  for (const auto& [name, sig] : handles) {
    INFO(name);
    named.insert(name);
    const std::regex decl("extern \"C\" __global__ void " + name + "\\(([^)]*)\\)");
    std::smatch m;
    REQUIRE(std::regex_search(src, m, decl));
    // "const float* x, long long n" -> {"const float*", "long long"}
    std::vector<std::string> types;
    const std::string params = m[1];
    std::size_t b = 0;
    while (b < params.size()) {
      std::size_t e = params.find(',', b);
      if (e == std::string::npos) e = params.size();
      std::string p = std::regex_replace(params.substr(b, e - b), std::regex("\\s+"), " ");
      p = std::regex_replace(p, std::regex("^ | $"), "");
      const std::size_t cut = p.find_last_of(" *");
      types.push_back(std::regex_replace(p.substr(0, cut + 1), std::regex(" $"), ""));
      b = e + 1;
    }
    CHECK(types == sig);
  }
  const std::set<std::string> all(cu::kernel_names().begin(), cu::kernel_names().end());
  CHECK(named == all);
}

namespace {
// Records what Towers bind; sums on the host.
struct RecordingReducer final : distributed::DeviceTowerReducer<backend::OneDnn, float> {
  std::vector<Device<backend::OneDnn>*>* bound;
  explicit RecordingReducer(std::vector<Device<backend::OneDnn>*>* b) : bound(b) {}
  void bind(const std::vector<Device<backend::OneDnn>*>& d) override { *bound = d; }
  void sum(const std::vector<float*>& buffers, std::size_t n) override { host.sum(buffers, n); }
  const char* name() const override { return "recording"; }
  distributed::HostTowerReducer<float> host;
};
}  // namespace

TEST_CASE("Towers give a device-aware reducer their own devices (NCCL makes no second Device per GPU)",
          "[backend][cuda][host][towers]") {
  using Cpu = Model<ResNetCifar<>, backend::OneDnn>;
  std::vector<Device<backend::OneDnn>*> bound;
  distributed::Towers<Cpu> towers(3, {3, 32, 32}, DataFormat::NHWC, NetOptions().with_repeat(1), 5, {},
                                  std::make_unique<RecordingReducer>(&bound));
  REQUIRE(bound.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(bound[i] == &towers.tower(i).device());
}
