// Numerics at training size: one training step of ResNet-8 at batch 128 on
// 32x32 inputs, oneDNN in float against the reference backend in double,
// in both layouts. Per tensor, the error is measured relative to the
// tensor's largest exact element (step_numerics.hpp); every gradient must be
// within 1e-3 at worst and 1e-4 at the median, the logits within 1e-6, the
// BN moving statistics within 1e-5. Before batch norm summed in double
// (backend/onednn/bn_kernels.hpp) the NHWC step missed these by up to 10x
// (docs/NUMERICS.md).
#include <catch2/catch.hpp>

#include <cifarnet/backend/onednn.hpp>

#include "step_numerics.hpp"
#include "instances/resnet.hpp"

using namespace cifarnet;

TEST_CASE("One ResNet-8 training step at batch 128 on oneDNN (float) matches exact arithmetic, both layouts",
          "[backend][onednn][numerics]") {
  const test::StepBatch batch = test::random_step_batch(128, 11);
  const std::vector<DataFormat> formats{DataFormat::NHWC, DataFormat::NCHW};
  const auto errors = test::compare_resnet_step<backend::OneDnn>(8, formats, batch);
  REQUIRE(errors.size() == 2);
  for (std::size_t f = 0; f < formats.size(); ++f) {
    const auto& e = errors[f];
    INFO("layout " << to_string(formats[f]));
    CHECK(e.loss.max <= 1e-6);
    CHECK(e.logits.max <= 1e-6);
    REQUIRE(e.grads.size() == 23);  // ResNet-8: 7 convolutions, 7 BN (gamma, beta), dense weights and biases
    for (const auto& t : e.grads) {
      INFO(t.name << ": max " << t.max << ", median " << t.median << " of max |g| " << t.scale);
      CHECK(t.scale > 0);
      CHECK(t.max <= 1e-3);
      CHECK(t.median <= 1e-4);
    }
    for (const auto& t : e.state) {
      INFO(t.name << ": max " << t.max << " of " << t.scale);
      CHECK(t.max <= 1e-5);
    }
  }
}
