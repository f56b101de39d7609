// The CUDA convolutions' cuDNN graph layer (backend/cuda/graph.hpp).
//  - On any machine (cuDNN validates graphs without a GPU): every
//    convolution geometry the examples use makes a valid operation graph for
//    the three passes in both layouts; the padded-copy rule and the output
//    size check of conv_shape; cuDNN itself refusing an inconsistent graph;
//    engines' numerical notes read as the options' flags.
//  - With a GPU: measure_pass picks an engine that obeys the options, its
//    plan rebuilds from the cached choice, and a misaligned tensor is a
//    BackendError, not a fault.
#include <catch2/catch.hpp>

#include <cifarnet/backend/cuda.hpp>

#include <string>
#include <vector>

#include "cuda_support.hpp"

using namespace cifarnet;
namespace cu = cifarnet::backend::cuda;

namespace {

// The convolutions of the ResNet (SAME stride 1, TF SAME stride 2 with its
// asymmetric pad, the official model's explicit padding + VALID, 1x1
// projections), the tutorial CNN (5x5) and VGG-19 on a style-transfer image,
// at the batch sizes the tests and examples use.
std::vector<ConvGeom> example_geometries(DataFormat f) {
  std::vector<ConvGeom> v;
  for (std::size_t n : {128u, 100u, 37u}) {
    v.push_back(ConvGeom::make(f, {n, 3, 32, 32}, 16, 3, 1, Padding::Same));
    v.push_back(ConvGeom::make(f, {n, 16, 32, 32}, 16, 3, 1, Padding::Same));
    v.push_back(ConvGeom::make(f, {n, 16, 32, 32}, 32, 3, 2, Padding::Same));
    v.push_back(ConvGeom::make(f, {n, 32, 34, 34}, 64, 3, 2, Padding::Valid));
    v.push_back(ConvGeom::make(f, {n, 16, 32, 32}, 32, 1, 2, Padding::Valid));
    v.push_back(ConvGeom::make(f, {n, 64, 8, 8}, 64, 3, 1, Padding::Same));
  }
  v.push_back(ConvGeom::make(f, {128, 3, 24, 24}, 64, 5, 1, Padding::Same));
  v.push_back(ConvGeom::make(f, {128, 64, 12, 12}, 64, 5, 1, Padding::Same));
  v.push_back(ConvGeom::make(f, {1, 3, 250, 333}, 64, 3, 1, Padding::Same));
  v.push_back(ConvGeom::make(f, {1, 512, 15, 20}, 512, 3, 1, Padding::Same));
  return v;
}

}  // namespace

TEST_CASE("cuDNN graphs of every convolution the examples run build without a GPU, in both layouts",
          "[backend][cuda][host]") {
  std::size_t built = 0;
  for (DataFormat f : {DataFormat::NCHW, DataFormat::NHWC})
    for (const ConvGeom& g : example_geometries(f)) {
      INFO(to_string(f) << " n=" << g.n << " " << g.ic << "x" << g.ih << "x" << g.iw << " -> " << g.oc
                        << " k=" << g.kh << " s=" << g.sh);
      const cu::ConvShape s = cu::conv_shape(g);
      for (cu::ConvPass p :
           {cu::ConvPass::Forward, cu::ConvPass::BackwardData, cu::ConvPass::BackwardFilter}) {
        const cu::ConvGraph graph = cu::conv_graph(p, s);
        CHECK(bool(graph.graph));
        CHECK(graph.pass == p);
        ++built;
      }
    }
  CHECK(built == 2 * (3 * 6 + 4) * 3);
}

TEST_CASE("conv_shape: asymmetric padding convolves a padded copy, and a wrong output size is refused",
          "[backend][cuda][host]") {
  // TF SAME with stride 2 on an even input pads 0 before and 1 after.
  const ConvGeom same2 = ConvGeom::make(DataFormat::NHWC, {8, 16, 32, 32}, 32, 3, 2, Padding::Same);
  REQUIRE(same2.pt == 0);
  REQUIRE(same2.pb == 1);
  const cu::ConvShape a = cu::conv_shape(same2);
  CHECK(a.h == 33);
  CHECK(a.w == 33);
  CHECK(a.ph == 0);
  CHECK(a.pw == 0);
  CHECK(a.oh == 16);
  CHECK(a.nhwc);
  // Symmetric padding stays the convolution's own.
  const ConvGeom same1 = ConvGeom::make(DataFormat::NCHW, {8, 16, 32, 32}, 16, 3, 1, Padding::Same);
  const cu::ConvShape b = cu::conv_shape(same1);
  CHECK(b.h == 32);
  CHECK(b.ph == 1);
  CHECK(b.pw == 1);
  CHECK_FALSE(b.nhwc);

  ConvGeom bad = same1;
  bad.oh += 1;
  CHECK_THROWS_WITH(cu::conv_shape(bad), Catch::Contains("differs from the geometry's 33x32"));
  // cuDNN refuses a graph whose sizes disagree (the check does not rely on conv_shape alone).
  cu::ConvShape wrong = b;
  wrong.ow -= 1;
  CHECK_THROWS_AS(cu::conv_graph(cu::ConvPass::Forward, wrong), BackendError);
  CHECK_THROWS_AS(cu::conv_graph(cu::ConvPass::BackwardFilter, wrong), BackendError);
}

TEST_CASE("Engines' numerical notes decide what the convolution options allow", "[backend][cuda][host]") {
  auto engine = [](std::vector<cudnnBackendNumericalNote_t> notes) {
    cu::EngineInfo e;
    e.numerical = std::move(notes);
    return e;
  };
  auto candidate = [](const cu::EngineInfo& e) {
    cu::AlgoCandidate c;
    c.ok = true;
    c.deterministic = e.deterministic();
    c.tensor_op = e.tensor_op();
    c.transform = e.transform();
    return c;
  };
  const cu::ConvOptions fp32{}, tf32{true, false}, det{false, true}, transforms{false, false, true};
  const cu::EngineInfo plain = engine({});
  CHECK(cu::allowed(candidate(plain), fp32));
  CHECK(cu::allowed(candidate(plain), det));
  for (auto note : {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
                    CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION}) {
    const cu::EngineInfo e = engine({note});
    CHECK(e.tensor_op());
    CHECK_FALSE(cu::allowed(candidate(e), fp32));
    CHECK(cu::allowed(candidate(e), tf32));
  }
  const cu::EngineInfo racy = engine({CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC});
  CHECK_FALSE(racy.deterministic());
  CHECK(cu::allowed(candidate(racy), fp32));
  CHECK_FALSE(cu::allowed(candidate(racy), det));
  for (auto note :
       {CUDNN_NUMERICAL_NOTE_FFT, CUDNN_NUMERICAL_NOTE_WINOGRAD, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4,
        CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13}) {
    const cu::EngineInfo e = engine({note});
    CHECK(e.transform());
    CHECK_FALSE(cu::allowed(candidate(e), fp32));
    CHECK(cu::allowed(candidate(e), transforms));
  }
  // Several notes at once: each counts.
  const cu::EngineInfo tc_racy =
      engine({CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC});
  CHECK(cu::allowed(candidate(tc_racy), tf32));  // TF32 allowed, determinism not asked
  CHECK_FALSE(cu::allowed(candidate(tc_racy), cu::ConvOptions{true, true}));
}

TEST_CASE("measure_pass picks an engine the options allow, its plan rebuilds, a misaligned tensor is refused",
          "[backend][cuda]") {
  if (!cuda_test::have_gpu()) return;
  Device<backend::Cuda> dev(0, cu::ConvOptions{false, true});
  const ConvGeom g = ConvGeom::make(DataFormat::NHWC, {32, 16, 16, 16}, 32, 3, 1, Padding::Same);
  const cu::ConvShape s = cu::conv_shape(g);
  const cu::GraphDesc props = cu::device_properties(dev.cudnn());
  cu::DeviceBuffer<float> x(dev.ordinal(), g.in_shape().size() + 4), w(dev.ordinal(), 3 * 3 * 16 * 32),
      y(dev.ordinal(), g.out_shape().size());
  const cu::DeviceGuard guard(dev.ordinal());
  for (cu::ConvPass p : {cu::ConvPass::Forward, cu::ConvPass::BackwardData, cu::ConvPass::BackwardFilter}) {
    INFO(cu::pass_name(p));
    const cu::ConvGraph graph = cu::conv_graph(p, s);
    const cu::EngineChoice c =
        cu::measure_pass(dev, graph, props, x.data(), w.data(), y.data(), dev.conv_options(),
                         std::size_t(1) << 28, "the test geometry");
    CHECK(c.engine >= 0);
    // The chosen engine as the heuristics describe it obeys the options.
    bool found = false;
    for (const cu::EngineInfo& e : cu::offered_engines(graph, props))
      if (e.choice == c) {
        found = true;
        CHECK(e.deterministic());
        CHECK_FALSE(e.tensor_op());
        CHECK_FALSE(e.transform());
        CHECK_FALSE(e.runtime_compiled);
      }
    CHECK(found);
    cu::ConvExecPlan plan = cu::build_plan(graph, props, c);
    REQUIRE(bool(plan));
    void* ws = dev.workspace(plan.workspace);
    CHECK_NOTHROW(cu::execute(dev, plan, p, x.data(), w.data(), y.data(), ws));
    CHECK_NOTHROW(cu::execute(dev, plan, p, x.data(), w.data(), y.data(), ws));
    CHECK(plan.packs.builds() == 1);  // the same addresses: the first call's variant pack
    CHECK_THROWS_WITH(cu::execute(dev, plan, p, x.data() + 1, w.data(), y.data(), ws),
                      Catch::Contains("16-byte aligned"));
    CHECK_NOTHROW(cu::execute(dev, plan, p, x.data(), w.data(), y.data(), ws));
    CHECK(plan.packs.builds() == 2);
  }
  dev.sync();
}
