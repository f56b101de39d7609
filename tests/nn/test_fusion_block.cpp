// The fused ResNet v1 block against the unfused block (test_fusion.cpp's
// comparison, in a file of its own so that no test translation unit takes
// long to compile).
#include <cifarnet/backend/onednn.hpp>

#include "nn/fusion_compare.hpp"

using namespace cifarnet;
using test::compare_all;

TEST_CASE("The fused ResNet v1 block equals the unfused block, with and without a stride",
          "[nn][fusion][resnet]") {
  compare_all<resnet::BlockV1<4, 4, 1>, resnet::BlockV1Unfused<4, 4, 1>>({4, 6, 6}, 3, 1e-5);
  compare_all<resnet::BlockV1<4, 8, 2>, resnet::BlockV1Unfused<4, 8, 2>>({4, 7, 6}, 2, 1e-5);
}
