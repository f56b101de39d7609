// The CUDA backend's host logic, which needs no GPU and so runs (never
// skips) on every machine that builds the backend: the environment
// (CIFARNET_CUDA_DEVICE, CIFARNET_CUDA_WORKSPACE_MB, the convolution
// options), the device a process takes from its MPI local rank, the choice
// of a convolution algorithm from cuDNN's measured list and its cache, the
// scoped device guard (over a counting stand-in of cudaGetDevice /
// cudaSetDevice), the typed kernel handles against the kernels' source,
// Towers binding their own devices to a device-aware reducer, and, over a
// counting stand-in of the copy calls (cudaMemcpyAsync, cudaMemsetAsync):
// the PCIe traffic counters, Staging's pass-through of device pointers and
// copies of host ones, and the lazily synchronised host mirror's states.
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/distributed/towers.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/train/trainer.hpp>
#include "instances/resnet.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
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

// The Trainer runs a CUDA model's queued launches at the end of each step
// (its update then starts while the host fetches the next batch); a CPU
// model has no queue.
static_assert(train::detail::has_queued_launches<Model<ResNetCifar<>, backend::Cuda>>::value);
static_assert(!train::detail::has_queued_launches<Model<ResNetCifar<>, backend::OneDnn>>::value);

TEST_CASE("CUDA graphs from the environment: CIFARNET_CUDA_GRAPHS=1 turns them on, a bad value is an error",
          "[backend][cuda][host]") {
  CHECK_FALSE(cu::graphs_from_env(Env{}));
  CHECK_FALSE(cu::graphs_from_env(Env{{{"CIFARNET_CUDA_GRAPHS", "0"}}}));
  CHECK(cu::graphs_from_env(Env{{{"CIFARNET_CUDA_GRAPHS", "1"}}}));
  CHECK_THROWS_WITH(cu::graphs_from_env(Env{{{"CIFARNET_CUDA_GRAPHS", "on"}}}),
                    Catch::Contains("CIFARNET_CUDA_GRAPHS=\"on\": expected a whole number in [0, 1]"));
}

TEST_CASE("The convolution algorithm: the fastest measured one that ran, fits, and obeys the options",
          "[backend][cuda][host]") {
  // Fastest first, as the measurement ranks them.
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
    a.fwd.engine = runs;
    return a;
  };
  const ConvGeom g = ConvGeom::make(DataFormat::NCHW, {128, 16, 32, 32}, 16, 3, 1, Padding::Same);
  const cu::ConvAlgoKey k{0, g, {}, 1 << 20};
  CHECK(cache.get(k, measure).fwd.engine == 1);
  CHECK(cache.get(k, measure).fwd.engine == 1);  // a second layer of the same geometry: cached
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
    CHECK(cache.get(key, measure).fwd.engine == ++expected);
    CHECK(cache.get(key, measure).fwd.engine == expected);
  }
  CHECK(runs == expected);
  CHECK(cache.measured() == std::size_t(expected));
  CHECK(cache.get(k, measure).fwd.engine == 1);
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
  void broadcast(const std::vector<float*>& buffers, std::size_t n) override {
    for (std::size_t i = 1; i < buffers.size(); ++i) std::copy(buffers[0], buffers[0] + n, buffers[i]);
  }
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

namespace {
struct FakeCopyApi;
/// A stand-in GPU: "device memory" is host vectors the copy API knows as
/// device memory (the staging buffers and the model's own device tensors).
struct FakeGpu {
  static constexpr std::size_t kStagingBase = 8;
  int ordinal() const { return 0; }
  float* buffer(std::size_t slot, std::size_t n) {
    auto& b = staging[slot];
    if (b.size() < n) b.resize(n);
    return b.data();
  }
  void sync() { ++syncs; }
  cu::TransferCounter& transfers() { return counter; }
  cu::BasicMirrorSet<FakeCopyApi, FakeGpu>& mirrors() { return mirror_set; }
  float* device_tensor(std::size_t n) {
    owned.emplace_back(n, 0.0f);
    return owned.back().data();
  }
  std::map<std::size_t, std::vector<float>> staging;
  std::vector<std::vector<float>> owned;
  int syncs = 0;
  cu::TransferCounter counter;
  cu::BasicMirrorSet<FakeCopyApi, FakeGpu> mirror_set;
};

/// The copy API over FakeGpu: counts its own calls independently of the
/// backend's counters, and checks each copy goes the way it says.
struct FakeCopyApi {
  struct Guard {
    explicit Guard(int) {}
  };
  static inline FakeGpu* gpu = nullptr;
  static inline cu::TransferCounts seen;
  static inline int poisons = 0;
  static bool in(const std::vector<float>& v, const void* p) {
    const auto* f = static_cast<const char*>(p);
    const auto* b = reinterpret_cast<const char*>(v.data());
    return f >= b && f < b + v.size() * sizeof(float);
  }
  static bool is_device(const void* p) {
    for (const auto& [slot, v] : gpu->staging)
      if (in(v, p)) return true;
    for (const auto& v : gpu->owned)
      if (in(v, p)) return true;
    return false;
  }
  static void copy(FakeGpu&, void* dst, const void* src, std::size_t bytes, cu::CopyDirection d,
                   const char*) {
    const bool up = d == cu::CopyDirection::HostToDevice;
    REQUIRE(is_device(up ? dst : src));
    REQUIRE_FALSE(is_device(up ? src : dst));
    std::memcpy(dst, src, bytes);
    (up ? seen.h2d_bytes : seen.d2h_bytes) += bytes;
    ++(up ? seen.h2d_copies : seen.d2h_copies);
  }
  static void poison(FakeGpu&, void* p, std::size_t bytes) {
    std::memset(p, 0xFF, bytes);
    ++poisons;
  }
  static void reset(FakeGpu& g) {
    gpu = &g;
    seen = {};
    poisons = 0;
  }
};
using FakeStaging = cu::BasicStaging<FakeCopyApi, FakeGpu>;
using FakeMirror = cu::BasicMirror<FakeCopyApi, FakeGpu>;
}  // namespace

TEST_CASE("Staging copies host buffers, passes device buffers through, and counts every byte it moves",
          "[backend][cuda][host][transfers]") {
  FakeGpu gpu;
  FakeCopyApi::reset(gpu);
  std::vector<float> x(100), y(40, 7.0f), acc(30, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  float* w = gpu.device_tensor(50);  // already on the device: no copy either way
  {
    FakeStaging st(gpu);
    const float* dx = st.in(x.data(), x.size());
    float* dy = st.out(y.data(), y.size());
    CHECK(st.in(w, 50) == w);
    float* da = st.inout(acc.data(), acc.size());
    CHECK(st.staged() == 3);
    CHECK(std::isnan(dy[0]));                                          // outputs start poisoned
    for (std::size_t i = 0; i + 1 < y.size(); ++i) dy[i] = 2 * dx[i];  // the "op" leaves y's last element
    for (auto* a = da; a != da + acc.size(); ++a) *a += 1;
    st.finish();
  }
  CHECK(y[3] == 6.0f);
  CHECK(std::isnan(y.back()));  // unwritten: NaN, not stale data
  CHECK(acc[0] == 2.0f);
  const cu::TransferCounts c = gpu.transfers().read();
  CHECK(c.h2d_bytes == (100 + 30) * sizeof(float));  // x and acc up; y is write-only, w on the device
  CHECK(c.d2h_bytes == (40 + 30) * sizeof(float));   // y and acc back
  CHECK(c.h2d_copies == 2);
  CHECK(c.d2h_copies == 2);
  CHECK(c == FakeCopyApi::seen);  // the counters count exactly the copy calls made
  CHECK(FakeCopyApi::poisons == 1);
  CHECK(gpu.syncs == 1);

  SECTION("an in-place op (one host buffer as input and output) copies it once each way") {
    gpu.transfers().reset();
    FakeCopyApi::reset(gpu);
    FakeStaging st(gpu);
    const float* in = st.in(x.data(), x.size());
    float* out = st.out(x.data(), x.size());
    CHECK(in == out);
    st.finish();
    CHECK(gpu.transfers().read() == FakeCopyApi::seen);
    CHECK(FakeCopyApi::seen.h2d_copies == 1);
    CHECK(FakeCopyApi::seen.d2h_copies == 1);
    CHECK(FakeCopyApi::seen.bytes() == 2 * 100 * sizeof(float));
    CHECK(gpu.syncs == 2);  // an output came back: the host waits for it
  }
  SECTION("an op on device-resident tensors stages nothing and moves no byte") {
    gpu.transfers().reset();
    FakeCopyApi::reset(gpu);
    float* a = gpu.device_tensor(64);
    float* b = gpu.device_tensor(64);
    FakeStaging st(gpu);
    CHECK(st.in(a, 64) == a);
    CHECK(st.out(b, 64) == b);
    CHECK(st.inout(a, 64) == a);
    const int syncs = gpu.syncs;
    st.finish();
    CHECK(gpu.syncs == syncs);  // nothing reaches the host: the op does not wait for the stream
    CHECK(st.staged() == 0);
    CHECK(gpu.transfers().read() == cu::TransferCounts{});
    CHECK(FakeCopyApi::seen == cu::TransferCounts{});
    CHECK(FakeCopyApi::poisons == 0);
  }
  SECTION("reset() returns the counts and starts again from zero") {
    const cu::TransferCounts before = gpu.transfers().reset();
    CHECK(before == c);
    CHECK(gpu.transfers().read() == cu::TransferCounts{});
    cu::counted_copy<FakeCopyApi>(gpu, gpu.device_tensor(8), x.data(), 8 * sizeof(float),
                                  cu::CopyDirection::HostToDevice, "test");
    CHECK(gpu.transfers().read().h2d_bytes == 8 * sizeof(float));
    CHECK(gpu.transfers().read().copies() == 1);
  }
}

TEST_CASE("The host mirror copies only when the other side is newer (clean / host-dirty / device-dirty)",
          "[backend][cuda][host][mirror]") {
  FakeGpu gpu;
  FakeCopyApi::reset(gpu);
  const std::size_t n = 16, bytes = n * sizeof(float);
  float* d = gpu.device_tensor(n);
  std::vector<float> h(n, 3.0f);  // initialised on the host (a parameter arena)
  FakeMirror m(gpu, d, h.data(), n, cu::MirrorState::HostDirty);
  auto counts = [&] { return gpu.transfers().read(); };

  // The first step uploads the host's values once; later steps copy nothing.
  CHECK(m.device_read() == d);
  CHECK(d[5] == 3.0f);
  CHECK(m.state() == cu::MirrorState::Clean);
  CHECK(counts().h2d_copies == 1);
  for (int step = 0; step < 5; ++step) {
    float* w = m.device_write();  // the optimizer updates on the device
    for (std::size_t i = 0; i < n; ++i) w[i] += 1.0f;
    CHECK(m.state() == cu::MirrorState::DeviceDirty);
  }
  CHECK(counts().copies() == 1);
  CHECK(h[5] == 3.0f);  // the host copy is stale until someone reads it

  // A checkpoint reads the host copy: one download, then none.
  CHECK(m.host_read()[5] == 8.0f);
  CHECK(m.state() == cu::MirrorState::Clean);
  m.host_read();
  CHECK(counts().d2h_copies == 1);
  CHECK(counts().d2h_bytes == bytes);

  // A restore writes the host copy: uploaded once, before the next device read.
  float* hw = m.host_write();
  CHECK(m.state() == cu::MirrorState::HostDirty);
  hw[5] = -1.0f;
  CHECK(counts().h2d_copies == 1);
  CHECK(m.device_read()[5] == -1.0f);
  m.device_read();
  CHECK(counts().h2d_copies == 2);
  CHECK(counts().h2d_bytes == 2 * bytes);

  // A host write after a device write downloads first (a partial write keeps
  // the device's other values).
  m.device_write()[0] = 42.0f;
  m.host_write()[1] = 43.0f;
  CHECK(counts().d2h_copies == 2);
  CHECK(m.device_read()[0] == 42.0f);
  CHECK(d[1] == 43.0f);
  CHECK(counts() == FakeCopyApi::seen);
  CHECK(counts().h2d_copies == 3);
  CHECK(std::string(cu::to_string(cu::MirrorState::DeviceDirty)) == "device-dirty");
}

TEST_CASE(
    "Staging uses a mirrored arena's device copy in place: no copy per op, one upload after a host write",
    "[backend][cuda][host][mirror][transfers]") {
  // The device-resident parameter arena: ops get host pointers into it (the
  // layers' and optimizers' arena pointers) and Staging resolves them to the
  // device copy.
  FakeGpu gpu;
  FakeCopyApi::reset(gpu);
  const std::size_t n = 64;
  std::vector<float> values(n, 0.5f), grads(n, 0.0f);
  float* dv = gpu.device_tensor(n);
  float* dg = gpu.device_tensor(n);
  gpu.mirrors().add(gpu, values.data(), dv, n, cu::MirrorState::HostDirty);  // initialised on the host
  gpu.mirrors().add(gpu, grads.data(), dg, n, cu::MirrorState::Clean);       // both zero
  CHECK_THROWS_AS(gpu.mirrors().add(gpu, values.data() + 8, gpu.device_tensor(4), 4, cu::MirrorState::Clean),
                  ConfigError);
  std::vector<float> x(16, 1.0f);  // an activation still on the host: staged as before
  for (int step = 0; step < 3; ++step) {
    FakeStaging st(gpu);
    float* w = st.inout(values.data() + 16, 16);  // one parameter's span: an SGD-like update
    const float* g = st.in(grads.data() + 16, 16);
    const float* in = st.in(x.data(), x.size());
    CHECK(w == dv + 16);
    CHECK(g == dg + 16);
    CHECK(st.staged() == 1);  // only the host activation
    for (int i = 0; i < 16; ++i) w[i] -= in[i] + g[i];
    st.finish();
  }
  // Three steps: the arena went up once (host-dirty at the start), the
  // activation three times; nothing came back.
  CHECK(FakeCopyApi::seen.h2d_copies == 1 + 3);
  CHECK(FakeCopyApi::seen.h2d_bytes == (n + 3 * 16) * sizeof(float));
  CHECK(FakeCopyApi::seen.d2h_copies == 0);
  CHECK(values[16] == 0.5f);  // the host copy is stale until read
  CHECK(gpu.mirrors().mirror_of(values.data() + 20)->state() == cu::MirrorState::DeviceDirty);
  CHECK(gpu.mirrors().mirror_of(grads.data())->state() == cu::MirrorState::Clean);
  CHECK(gpu.mirrors().mirror_of(x.data()) == nullptr);
  {
    FakeStaging st(gpu);
    CHECK_THROWS_AS(st.in(values.data() + 60, 8), ConfigError);  // past the mirror's end
  }
  gpu.mirrors().host_read_all();  // a checkpoint: one download of the dirty buffer
  CHECK(values[16] == 0.5f - 3 * 1.0f);
  CHECK(FakeCopyApi::seen.d2h_copies == 1);
  gpu.mirrors().host_write_all();  // a restore
  values[0] = 9.0f;
  {
    FakeStaging st(gpu);
    CHECK(st.in(values.data(), 1)[0] == 9.0f);  // uploaded before the op reads
    st.finish();
  }
  CHECK(FakeCopyApi::seen.h2d_copies == 1 + 3 + 1);  // the values went up again, before that op
  CHECK(gpu.mirrors().mirror_of(grads.data())->state() == cu::MirrorState::HostDirty);  // up when next read
  CHECK(gpu.transfers().read() == FakeCopyApi::seen);

  SECTION("an optimizer's slot mirrored beside the arena goes back to the host when its owner lets go") {
    // ArenaKernels::adopt_state: the slot is mirrored, updated on the device,
    // and removed (its host copy downloaded first) when the optimizer goes.
    std::vector<float> slot(n, 0.0f);
    gpu.mirrors().add(gpu, slot.data(), gpu.device_tensor(n), n, cu::MirrorState::HostDirty);
    {
      FakeStaging st(gpu);
      float* a = st.inout(slot.data(), n);
      for (std::size_t i = 0; i < n; ++i) a[i] = float(i);
      CHECK(st.staged() == 0);
      st.finish();
    }
    CHECK(slot[5] == 0.0f);  // device-dirty: the host copy is stale
    const std::size_t ranges = gpu.mirrors().size();
    CHECK(gpu.mirrors().remove(slot.data()));
    CHECK(slot[5] == 5.0f);  // downloaded before the range was forgotten
    CHECK(gpu.mirrors().size() == ranges - 1);
    CHECK(gpu.mirrors().mirror_of(slot.data()) == nullptr);
    CHECK_FALSE(gpu.mirrors().remove(slot.data()));        // twice: nothing
    CHECK_FALSE(gpu.mirrors().remove(values.data() + 1));  // only a range's start names it
  }
}

namespace {
/// Stand-in memory for the read-back area: "device" bytes FakeCopyApi knows
/// as device memory (a FakeGpu tensor), host bytes plain vectors.
struct FakeDeviceBytes {
  FakeDeviceBytes() = default;
  FakeDeviceBytes(int, std::size_t n) : p(FakeCopyApi::gpu->device_tensor((n + 3) / 4)), size_(n) {}
  void* data() { return p; }
  std::size_t size() const { return size_; }
  float* p = nullptr;
  std::size_t size_ = 0;
};
struct FakeHostBytes {
  FakeHostBytes() = default;
  explicit FakeHostBytes(std::size_t n) : v(n) {}
  unsigned char* data() { return v.data(); }
  std::size_t size() const { return v.size(); }
  std::vector<unsigned char> v;
};
using FakeReadback = cu::BasicReadback<FakeCopyApi, FakeGpu, FakeHostBytes, FakeDeviceBytes>;

/// An "op": writes `values` into fresh room of `rb` as its kernel would and
/// returns the Pending of their sum (through `finish` when given).
Pending write_values(FakeReadback& rb, const std::vector<double>& values, PendingFinish finish = nullptr,
                     PendingArgs args = {}) {
  const auto room = rb.reserve(values.size() * sizeof(double));
  std::memcpy(room.device, values.data(), values.size() * sizeof(double));
  return Pending::on(rb, room.generation, room.offset, values.size(), finish, args);
}
}  // namespace

TEST_CASE("The read-back area brings a step's pending values to the host in one copy and one wait",
          "[backend][cuda][host][transfers][readback]") {
  FakeGpu gpu;
  FakeCopyApi::reset(gpu);
  FakeReadback rb(gpu);
  // A step: the loss's rows, the weight decay's partial sums, the numerics sum.
  const Pending loss = write_values(
      rb, {1.0, 2.0, 3.0, 6.0}, [](double s, const unsigned char*, const PendingArgs& a) { return s / a.a; },
      PendingArgs{4.0});
  const Pending decay = write_values(rb, {0.5, 0.25});
  const Pending numerics = write_values(rb, {1e300, 1e300});
  CHECK_FALSE(loss.is_ready());
  CHECK(gpu.transfers().read() == cu::TransferCounts{});  // nothing moved yet
  CHECK(gpu.syncs == 0);
  CHECK(rb.used() == (4 + 2 + 2) * sizeof(double));

  CHECK(loss.get() == 3.0);  // (1 + 2 + 3 + 6) / 4
  CHECK(decay.get() == 0.75);
  CHECK(numerics.get() == 2e300);  // finite: the numerics check passes
  const cu::TransferCounts c = gpu.transfers().read();
  CHECK(c.d2h_copies == 1);  // the three values: one copy
  CHECK(c.d2h_bytes == 8 * sizeof(double));
  CHECK(c.h2d_copies == 0);
  CHECK(c == FakeCopyApi::seen);
  CHECK(gpu.syncs == 1);  // and one wait
  CHECK(rb.fetches() == 1);
  CHECK(loss.get() == 3.0);  // read again: no copy
  CHECK(gpu.transfers().read() == c);

  SECTION("a fetched batch stays readable until two more batches are fetched") {
    const Pending next = write_values(rb, {7.0});
    CHECK(decay.get() == 0.75);  // batch 0 still readable
    CHECK(next.get() == 7.0);    // fetches batch 1
    CHECK(rb.fetches() == 2);
    CHECK(decay.get() == 0.75);  // batch 0's host buffer is not the one batch 1 went to
    const Pending third = write_values(rb, {8.0});
    CHECK(third.get() == 8.0);  // batch 2 overwrites batch 0's host buffer
    CHECK(next.get() == 7.0);   // batch 1 is still there
    CHECK_THROWS_WITH(decay.get(), Catch::Contains("were overwritten"));
  }
  SECTION("a reservation that does not fit fetches the open batch first; a large one grows the room") {
    const Pending a = write_values(rb, {1.5});
    std::vector<double> big((std::size_t(64) << 10) / sizeof(double) + 10, 1.0);  // more than the 64 KiB room
    const Pending b = write_values(rb, big);
    CHECK(rb.fetches() == 2);  // `a`'s batch was fetched to make room
    CHECK(a.get() == 1.5);     // and stays readable after the room grew
    CHECK(b.get() == double(big.size()));
    CHECK(rb.fetches() == 3);
  }
  SECTION("a finish step sees the bytes an op wrote after its doubles (the loss's bad-label count)") {
    const auto room = rb.reserve(2 * sizeof(double));
    const double row = 2.5;
    const int bad = 1;
    std::memcpy(room.device, &row, sizeof row);
    std::memcpy(static_cast<unsigned char*>(room.device) + sizeof(double), &bad, sizeof bad);
    const Pending p = Pending::on(rb, room.generation, room.offset, 1,
                                  [](double, const unsigned char* tail, const PendingArgs&) -> double {
                                    int b = 0;
                                    std::memcpy(&b, tail, sizeof b);
                                    if (b) throw DataError("bad label");
                                    return 0;
                                  });
    CHECK_THROWS_AS(p.get(), DataError);
  }
}

namespace {
/// A stand-in of the CUDA runtime for the input ring: streams and events
/// are names, and every call is logged in order.
struct FakeRingApi {
  static inline std::vector<std::string> log;
  static inline bool pinned_ok = true;
  struct Stream {
    explicit Stream(int) {}
    const char* get() { return "copy"; }
  };
  struct Event {
    int id = next_id++;
    static inline int next_id = 0;
  };
  struct HostBytes {
    HostBytes() = default;
    explicit HostBytes(std::size_t n) : v(n), pinned_(pinned_ok) {}
    unsigned char* data() { return v.data(); }
    std::size_t size() const { return v.size(); }
    bool pinned() const { return pinned_; }
    std::vector<unsigned char> v;
    bool pinned_ = false;
  };
  static void record(Event& e, const char* s) {
    log.push_back("record e" + std::to_string(e.id) + " on " + s);
  }
  static void stream_wait(const char* s, Event& e) {
    log.push_back(std::string(s) + " waits e" + std::to_string(e.id));
  }
  static void host_wait(Event& e) { log.push_back("host waits e" + std::to_string(e.id)); }
  template <class D>
  static void copy_async(D&, const char* s, void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
    log.push_back(std::string("copy ") + std::to_string(bytes) + " on " + s);
  }
};
struct RingGpu {
  int ordinal() const { return 0; }
  const char* stream() const { return "compute"; }
  cu::TransferCounter& transfers() { return counter; }
  cu::TransferCounter counter;
};
}  // namespace

TEST_CASE("The input ring uploads on a copy stream the compute stream waits for, and reuses a slot safely",
          "[backend][cuda][host][transfers][ring]") {
  FakeRingApi::log.clear();
  FakeRingApi::Event::next_id = 0;
  FakeRingApi::pinned_ok = true;
  RingGpu gpu;
  cu::BasicInputRing<FakeRingApi, RingGpu> ring(gpu);  // events e0, e1: copied; e2, e3: consumed
  std::vector<float> batch[3] = {std::vector<float>(8, 1.0f), std::vector<float>(8, 2.0f),
                                 std::vector<float>(8, 3.0f)};
  std::vector<float> device[2] = {std::vector<float>(8), std::vector<float>(8)};
  const std::size_t bytes = 8 * sizeof(float);
  for (int k = 0; k < 3; ++k) {
    const std::size_t j = ring.next();
    CHECK(j == std::size_t(k % 2));
    ring.upload(batch[k].data(), bytes, device[j].data());
    CHECK(device[j] == batch[k]);
  }
  const std::vector<std::string> expected = {
      // upload 0 into slot 0: a copy on the copy stream, the compute stream waits for it
      "copy 32 on copy", "record e0 on copy", "compute waits e0",
      // upload 1 into slot 1: slot 0's step is queued (consumed e2)
      "record e2 on compute", "copy 32 on copy", "record e1 on copy", "compute waits e1",
      // upload 2 into slot 0 again: the host waits for slot 0's last copy out of its pinned buffer,
      // and the copy stream for the compute work that read slot 0's device tensor
      "host waits e0", "record e3 on compute", "copy waits e2", "copy 32 on copy", "record e0 on copy",
      "compute waits e0"};
  CHECK(FakeRingApi::log == expected);
  CHECK(gpu.transfers().read().h2d_copies == 3);
  CHECK(gpu.transfers().read().h2d_bytes == 3 * bytes);
  CHECK(ring.uploads() == 3);
  CHECK(ring.pinned());

  SECTION("without page-locked memory the slots fall back to pageable memory and say so") {
    FakeRingApi::pinned_ok = false;
    cu::BasicInputRing<FakeRingApi, RingGpu> plain(gpu);
    plain.upload(batch[0].data(), bytes, device[0].data());
    CHECK(device[0] == batch[0]);
    CHECK_FALSE(plain.pinned());
  }
}

namespace {
/// A stand-in GPU for BasicTensorCache: streams are names, an event is done
/// when the test says its stream has got that far, malloc hands out fake
/// addresses (and fails when told to); every call is logged.
struct FakeTensorApi {
  using Stream = std::string;
  struct Event {
    int id = -1;  // -1: not yet made (made on first record, as the runtime's)
  };
  static inline std::vector<std::string> log;
  static inline std::map<int, std::pair<std::string, int>> recorded;  // event -> (stream, position)
  static inline std::map<std::string, int> queued, completed;         // per stream: work queued / done
  static inline int next_event = 0;
  static inline std::uintptr_t next_address = 0x1000;
  static inline int fail_mallocs = 0;  // the next n mallocs fail
  static void reset() {
    log.clear();
    recorded.clear();
    queued.clear();
    completed.clear();
    next_event = 0;
    next_address = 0x1000;
    fail_mallocs = 0;
  }
  static void record(Event& e, const Stream& s, int) {
    if (e.id < 0) e.id = next_event++;
    recorded[e.id] = {s, queued[s]};
    log.push_back("record e" + std::to_string(e.id) + " on " + s);
  }
  static bool done(Event& e) { return completed[recorded[e.id].first] >= recorded[e.id].second; }
  static void wait(Event& e) {
    log.push_back("host waits e" + std::to_string(e.id));
    auto& c = completed[recorded[e.id].first];
    c = std::max(c, recorded[e.id].second);
  }
  static void sync_device(int) {
    log.push_back("device sync");
    for (auto& [s, n] : queued) completed[s] = n;
  }
  static void* try_malloc(int, std::size_t bytes, std::string* why) {
    if (fail_mallocs > 0) {
      --fail_mallocs;
      *why = "out of memory";
      log.push_back("malloc " + std::to_string(bytes) + " failed");
      return nullptr;
    }
    log.push_back("malloc " + std::to_string(bytes));
    const std::uintptr_t a = next_address;
    next_address += bytes;
    return reinterpret_cast<void*>(a);
  }
  static void free(int, void* p) noexcept {
    log.push_back("free " + std::to_string(reinterpret_cast<std::uintptr_t>(p)));
  }
  /// Work queued on stream s (a kernel reading a tensor), and the GPU reaching it.
  static void enqueue(const std::string& s) { ++queued[s]; }
  static void finish(const std::string& s) { completed[s] = queued[s]; }
};
}  // namespace

TEST_CASE("Tensor memory reuses a freed block once its streams are past it, never waiting for the device",
          "[backend][cuda][host][memory]") {
  using Api = FakeTensorApi;
  Api::reset();
  cu::BasicTensorCache<Api> cache(0);
  cache.attach("compute");
  cache.attach("copy");

  void* a = cache.allocate(1000);  // rounded to 1024
  CHECK(Api::log == std::vector<std::string>{"malloc 1024"});
  // Its blocks are known as device memory without a driver query (is_device_pointer).
  const auto at = [](void* p, std::ptrdiff_t off) {
    return static_cast<const void*>(static_cast<char*>(p) + off);
  };
  CHECK(cache.owns(a));
  CHECK(cache.owns(at(a, 1023)));
  CHECK_FALSE(cache.owns(at(a, 1024)));
  CHECK_FALSE(cache.owns(at(a, -1)));
  Api::enqueue("compute");  // a kernel still reading a
  cache.deallocate(a, 1000);
  CHECK(cache.cached_bytes() == 1024);
  CHECK(cache.pending_blocks() == 1);
  // The compute stream has not got past a's last use: a new block, no wait.
  void* b = cache.allocate(1000);
  CHECK(b != a);
  // The copy stream's event is done at once (nothing queued there); the compute stream's is not.
  Api::finish("compute");
  CHECK(cache.pending_blocks() == 0);
  CHECK(cache.allocate(1024) == a);  // the same rounded size
  CHECK(cache.cached_bytes() == 0);
  // The steady state of a loop: free, then the same sizes again, no malloc.
  const std::size_t made = cache.mallocs();
  for (int step = 0; step < 5; ++step) {
    Api::enqueue("compute");
    cache.deallocate(a, 1000);
    cache.deallocate(b, 1000);
    Api::finish("compute");
    a = cache.allocate(1000);
    b = cache.allocate(1000);
  }
  CHECK(cache.mallocs() == made);
  // A different size is never handed a block of another size.
  void* c = cache.allocate(4096);
  CHECK(c != a);
  CHECK(c != b);
  for (const auto& line : Api::log) CHECK(line.find("sync") == std::string::npos);
  for (const auto& line : Api::log) CHECK(line.find("host waits") == std::string::npos);
  // Events are reused, not made per free: two streams, at most a few pending frees at a time.
  CHECK(Api::next_event <= 6);

  SECTION("out of memory: waits for the pending blocks, frees the cache, tries once more") {
    Api::enqueue("compute");
    cache.deallocate(c, 4096);  // pending on the compute stream
    Api::log.clear();
    Api::fail_mallocs = 1;
    void* d = cache.allocate(8192);
    CHECK(d != nullptr);
    REQUIRE(Api::log.size() == 4);
    CHECK(Api::log[0] == "malloc 8192 failed");
    CHECK(Api::log[1].rfind("host waits e", 0) == 0);  // the compute stream's event of c
    CHECK(Api::log[2] == "free " + std::to_string(reinterpret_cast<std::uintptr_t>(c)));
    CHECK(Api::log[3] == "malloc 8192");
    CHECK(cache.cached_bytes() == 0);
    Api::fail_mallocs = 2;
    CHECK_THROWS_WITH(cache.allocate(512), Catch::Contains("512 bytes for a tensor on GPU 0: out of memory"));
  }
  SECTION("with no stream attached (every Device gone) a free waits for the device, as cudaFree would") {
    cache.detach("compute");
    cache.detach("copy");
    Api::log.clear();
    cache.deallocate(c, 4096);
    CHECK(Api::log == std::vector<std::string>{"device sync"});
    CHECK(cache.allocate(4096) == c);
  }
  SECTION("closed (the process is ending): the cache is freed, later frees go straight back") {
    cache.deallocate(c, 4096);
    Api::log.clear();
    CHECK(cache.owns(c));  // cached: still device memory
    cache.close();
    CHECK(Api::log ==
          std::vector<std::string>{"free " + std::to_string(reinterpret_cast<std::uintptr_t>(c))});
    CHECK_FALSE(cache.owns(c));
    Api::log.clear();
    cache.deallocate(a, 1000);
    CHECK(Api::log ==
          std::vector<std::string>{"free " + std::to_string(reinterpret_cast<std::uintptr_t>(a))});
  }
}

TEST_CASE("A convolution plan's variant pack is built again only when an address changes",
          "[backend][cuda][host]") {
  cu::PackCache<std::string> cache;  // a stand-in pack: the addresses it was built for
  float x[4], w[4], y[4], ws[4], other[4];
  int built = 0;
  const auto build = [&](const char* what) {
    return [&built, what] {
      ++built;
      return std::string(what);
    };
  };
  CHECK(cache.get({x, w, y, ws}, build("a")) == "a");
  // The same addresses step after step: the first pack, no build.
  for (int step = 0; step < 5; ++step) CHECK(cache.get({x, w, y, ws}, build("b")) == "a");
  CHECK(built == 1);
  // Any one address moving (a new batch size, another workspace) builds anew.
  CHECK(cache.get({x, w, other, ws}, build("c")) == "c");
  CHECK(cache.get({x, w, other, other}, build("d")) == "d");
  CHECK(cache.get({x, w, y, ws}, build("e")) == "e");
  CHECK(built == 4);
  CHECK(cache.builds() == 4);
  // A build that throws (a misaligned tensor) leaves no pack behind: the next call builds.
  CHECK_THROWS(cache.get({other, w, y, ws}, []() -> std::string { throw BackendError("misaligned"); }));
  CHECK(cache.get({other, w, y, ws}, build("f")) == "f");
  CHECK(cache.get({x, w, y, ws}, build("g")) == "g");
  CHECK(built == 6);
}

namespace {

/// A stand-in GPU for the launch queue: one stream whose kernels are host
/// functions. Launched, a kernel runs at once (the stream is in order);
/// while the stream captures, it is recorded into the graph being made; a
/// graph's launch runs its kernels in order. Every launch is logged.
struct QueueGpu {
  std::vector<std::string> log;
  bool capturing = false, invalid = false;
  std::vector<std::function<void()>> recording;
  void kernel(const std::string& name, std::function<void()> f) {
    if (capturing) {
      recording.push_back(std::move(f));
      return;
    }
    log.push_back(name);
    f();
  }
  /// A call that cannot be captured (a host wait, say): it invalidates a capture.
  void uncapturable() {
    if (capturing) invalid = true;
  }
};

struct FakeGraphApi {
  using Stream = QueueGpu*;
  struct Graph {
    std::vector<std::function<void()>> kernels;
  };
  static inline int instantiated = 0;
  static void begin_capture(Stream s) {
    REQUIRE_FALSE(s->capturing);
    s->capturing = true;
    s->invalid = false;
    s->recording.clear();
  }
  static Graph end_capture(Stream s) {
    s->capturing = false;
    if (s->invalid)
      throw BackendError("CUDA cudaStreamEndCapture: operation not permitted when stream is capturing");
    ++instantiated;
    return Graph{std::move(s->recording)};
  }
  static void end_capture_noexcept(Stream s) { s->capturing = false; }
  static void launch(Graph& g, Stream s) {
    s->log.push_back("graph of " + std::to_string(g.kernels.size()));
    for (auto& k : g.kernels) k();
  }
};

using Queue = cu::BasicLaunchQueue<FakeGraphApi>;

/// One "step": y = a·x + b over `v`, then v *= c, as `n` kernels each
/// queued with its signature (the kernel's name, the data's address, its
/// scalars), the way KernelLibrary queues a launch.
void step_work(Queue& q, std::vector<double>& v, double a, double b, double c, int n = 4) {
  for (int k = 0; k < n; ++k) {
    const bool affine = k % 2 == 0;
    cu::LaunchSignature sig;
    sig.add(affine ? 1 : 2).add(v.data()).add(a).add(b).add(c);
    double* p = v.data();
    const std::size_t len = v.size();
    q.submit(affine ? "affine" : "scale", sig, [=](QueueGpu* s) {
      s->kernel(affine ? "affine" : "scale", [=] {
        for (std::size_t i = 0; i < len; ++i) p[i] = affine ? a * p[i] + b : c * p[i];
      });
    });
  }
}

/// The same step run directly in double, for the expected values.
void step_reference(std::vector<double>& v, double a, double b, double c, int n = 4) {
  for (int k = 0; k < n; ++k)
    for (double& x : v) x = k % 2 == 0 ? a * x + b : c * x;
}

}  // namespace

TEST_CASE("The launch queue replays a segment as one graph only when its signatures repeat",
          "[backend][cuda][host]") {
  QueueGpu gpu;
  std::vector<double> v = {1, 2, 3}, ref = v;
  SECTION("graphs off: every item runs when submitted") {
    Queue q(&gpu, false);
    step_work(q, v, 2, 1, 0.5);
    CHECK(q.empty());
    CHECK(gpu.log.size() == 4);
    step_reference(ref, 2, 1, 0.5);
    CHECK(v == ref);
    CHECK(q.stats().submitted == 0);
  }
  SECTION("first sight item by item, second sight captured and launched, then one launch a step") {
    Queue q(&gpu, true);
    const int instantiated = FakeGraphApi::instantiated;
    for (int step = 0; step < 5; ++step) {
      INFO("step " << step);
      gpu.log.clear();
      step_work(q, v, 0.5, 1, 2);
      CHECK(q.queued() == 4);
      CHECK(gpu.log.empty());  // queued, nothing ran yet
      CHECK(v == ref);
      q.flush();
      step_reference(ref, 0.5, 1, 2);
      CHECK(v == ref);  // the same values whichever way it ran
      if (step == 0)
        CHECK(gpu.log == std::vector<std::string>{"affine", "scale", "affine", "scale"});
      else
        CHECK(gpu.log == std::vector<std::string>{"graph of 4"});
    }
    CHECK(FakeGraphApi::instantiated == instantiated + 1);
    CHECK(q.stats().eager_segments == 1);
    CHECK(q.stats().captures == 1);
    CHECK(q.stats().replays == 3);
    CHECK(q.stats().replayed_items == 12);
    CHECK(q.stats().last_eager.find("first sight of the segment of 4 items from 'affine' to 'scale'") !=
          std::string::npos);
  }
  SECTION("a changed scalar or pointer never replays the stale graph") {
    Queue q(&gpu, true);
    for (int step = 0; step < 3; ++step) {  // captured at step 1, replayed at 2
      step_work(q, v, 0.5, 1, 2);
      q.flush();
      step_reference(ref, 0.5, 1, 2);
    }
    gpu.log.clear();
    step_work(q, v, 0.5, 1, 3);  // a new learning rate, say
    q.flush();
    step_reference(ref, 0.5, 1, 3);
    CHECK(v == ref);
    CHECK(gpu.log.size() == 4);           // first sight of this signature: item by item
    std::vector<double> w = v, wref = v;  // other memory, the same scalars
    gpu.log.clear();
    step_work(q, w, 0.5, 1, 2);
    q.flush();
    step_reference(wref, 0.5, 1, 2);
    CHECK(w == wref);
    CHECK(v == ref);  // the graph of v's step did not run
    CHECK(gpu.log.size() == 4);
  }
  SECTION("segments that alternate (two input slots) each get their graph") {
    Queue q(&gpu, true);
    std::vector<double> w = {4, 5}, wref = w;
    for (int step = 0; step < 8; ++step) {
      std::vector<double>& x = step % 2 ? w : v;
      std::vector<double>& r = step % 2 ? wref : ref;
      step_work(q, x, 1.5, -1, 0.25);
      q.flush();
      step_reference(r, 1.5, -1, 0.25);
    }
    CHECK(v == ref);
    CHECK(w == wref);
    CHECK(q.graphs() == 2);
    CHECK(q.stats().captures == 2);
    CHECK(q.stats().replays == 4);
  }
  SECTION("a short segment runs item by item, and says why") {
    Queue q(&gpu, true);
    for (int step = 0; step < 3; ++step) {
      gpu.log.clear();
      step_work(q, v, 2, 0, 1, 3);
      q.flush();
      CHECK(gpu.log.size() == 3);
    }
    CHECK(q.stats().captures == 0);
    CHECK(q.stats().last_eager == "a segment of 3 items (a graph needs 4)");
  }
  SECTION("a capture that fails turns graphs off for good, and the segment still runs") {
    Queue q(&gpu, true);
    const auto work = [&] {
      step_work(q, v, 0.5, 1, 2);
      cu::LaunchSignature sig;
      sig.add(7);
      q.submit("a host wait", sig, [](QueueGpu* s) { s->uncapturable(); });
    };
    for (int step = 0; step < 3; ++step) {
      work();
      q.flush();
      step_reference(ref, 0.5, 1, 2);
      CHECK(v == ref);
    }
    CHECK_FALSE(q.enabled());
    INFO(q.stats().disabled);
    CHECK(q.stats().disabled.find(
              "the segment of 5 items from 'affine' to 'a host wait' could not be captured: "
              "cifarnet: CUDA cudaStreamEndCapture: operation not permitted") != std::string::npos);
    CHECK(q.stats().captures == 0);
    gpu.log.clear();
    step_work(q, v, 0.5, 1, 2);  // off: run when submitted
    CHECK(q.empty());
    CHECK(gpu.log.size() == 4);
    q.enable(true);  // stays off
    CHECK_FALSE(q.enabled());
  }
  SECTION("work whose arguments change every step stops being captured") {
    Queue q(&gpu, true);
    for (int k = 0; k < 2 * Queue::kMaxMisses; ++k) {  // each signature twice, never a third time
      step_work(q, v, 0.5, double(k / 2), 2);
      q.flush();
      step_reference(ref, 0.5, double(k / 2), 2);
    }
    CHECK(v == ref);
    INFO("replays " << q.stats().replays << " eager " << q.stats().eager_segments << " last "
                    << q.stats().last_eager);
    CHECK(q.stats().captures == std::uint64_t(Queue::kMaxMisses));
    CHECK_FALSE(q.enabled());
    CHECK(q.graphs() == 0);
    CHECK(q.stats().disabled.find("8 graphs were captured with no replay in between") != std::string::npos);
  }
  SECTION("at most kMaxGraphs graphs are kept, the least recently used goes") {
    Queue q(&gpu, true);
    std::vector<std::vector<double>> bufs(Queue::kMaxGraphs + 1, std::vector<double>{1.0});
    for (auto& b : bufs)
      for (int k = 0; k < 3; ++k) {  // seen, captured, replayed
        step_work(q, b, 1, 1, 1);
        q.flush();
      }
    CHECK(q.graphs() == Queue::kMaxGraphs);
    CHECK(q.stats().captures == Queue::kMaxGraphs + 1);
    CHECK(q.stats().replays == Queue::kMaxGraphs + 1);
    step_work(q, bufs[1], 1, 1, 1);  // kept: replayed
    q.flush();
    CHECK(q.stats().replays == Queue::kMaxGraphs + 2);
    step_work(q, bufs[0], 1, 1, 1);  // the first graph went: captured again
    q.flush();
    CHECK(q.stats().captures == Queue::kMaxGraphs + 2);
    CHECK(q.graphs() == Queue::kMaxGraphs);
    CHECK(q.enabled());
    // Each step adds 2: four steps for buffers 0 and 1, three for the rest.
    for (std::size_t i = 0; i < bufs.size(); ++i) CHECK(bufs[i][0] == (i < 2 ? 9.0 : 7.0));
    q.drop_graphs();  // (a Device, before its cuDNN handle goes)
    CHECK(q.graphs() == 0);
  }
  SECTION("an item that throws empties the queue; the next segment runs") {
    Queue q(&gpu, true);
    step_work(q, v, 1, 1, 1);
    cu::LaunchSignature sig;
    q.submit("a failing launch", sig, [](QueueGpu*) { throw BackendError("CUDA kernel launch failed"); });
    CHECK_THROWS_WITH(q.flush(), Catch::Contains("CUDA kernel launch failed"));
    CHECK(q.empty());
    step_reference(ref, 1, 1, 1);
    CHECK(v == ref);  // the items before it ran
    step_work(q, v, 1, 1, 1);
    q.flush();
    step_reference(ref, 1, 1, 1);
    CHECK(v == ref);
  }
}
