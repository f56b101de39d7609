// Probe: ConvBatchNorm's own training passes (ops::Conv2d::forward_stats,
// backward_images_bn) with the direct kernels and with the own Winograd
// kernels inside them (direct::forward_images / backward_images given a
// winograd::Conv3x3::image_conv), at ResNet's three stride-1 stage shapes,
// batch 128, 2 threads: medians of 11 calls each, the two alternated.
// Usage: winograd_bn ROUNDS [1: new weights every call, as in training
// (the Winograd transforms them each time)].
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>

using namespace cifarnet;
using B = backend::OneDnn;

template <class F>
double median_ms(F&& f) {
  std::vector<double> t;
  for (int i = 0; i < 11; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[5];
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::size_t n = 128;
  struct S {
    std::size_t h, c;
  };
  for (int r = 1; r <= rounds; ++r)
    for (S s : {S{32, 16}, S{16, 32}, S{8, 64}}) {
      const ConvGeom g = ConvGeom::make(DataFormat::NHWC, Shape{n, s.c, s.h, s.h}, s.c, 3, 1, Padding::Same);
      const ChannelGeom cg{DataFormat::NHWC, n, s.c, s.h, s.h};
      Device<B> dev;
      Rng rng(7);
      std::vector<float> x(cg.size()), wt(9 * s.c * s.c), y(cg.size()), dz(cg.size()), dx(cg.size()),
          dw(wt.size()), gamma(s.c, 1.f), beta(s.c, 0.f), z(cg.size()), mean(s.c), var(s.c), dg(s.c), db(s.c);
      for (auto& v : x) v = float(rng.uniform(-1, 1));
      for (auto& v : wt) v = float(rng.uniform(-0.2, 0.2));
      for (auto& v : dz) v = float(rng.uniform(-1, 1));
      std::vector<double> st(2 * s.c);
      ops::BatchNorm<B, float> bn;
      std::printf("round %d, %zux%zu, %zu ch:", r, s.h, s.h, s.c);
      const bool fresh = argc > 2 && argv[2][0] == '1';  // new weights every call, as a training step's
      {  // the direct kernels, as ops::Conv2d runs them (Direct asked for)
        ops::Conv2d<B, float> conv;
        conv.set_algorithm(ConvAlgorithm::Direct);
        std::uint64_t v = 1;
        const double f = median_ms([&] {
          conv.set_weights_version(fresh ? ++v : 1);
          conv.forward_stats(dev, g, x.data(), wt.data(), y.data(), st.data());
        });
        bn.forward_train(dev, cg, 1e-3, y.data(), gamma.data(), beta.data(), z.data(), mean.data(),
                         var.data(), true);
        bn.backward_sums(dev, cg, 1e-3, y.data(), dz.data(), gamma.data(), mean.data(), var.data(), dg.data(),
                         db.data(), true);
        const auto map = bn.grad_map(dev, cg, y.data(), dz.data(), mean.data(), true);
        const double b = median_ms([&] {
          conv.set_weights_version(fresh ? ++v : 1);
          conv.backward_images_bn(dev, g, x.data(), map, wt.data(), dx.data(), dw.data());
        });
        std::printf("  direct fwd %.3f bwd %.3f ms", f, b);
      }
      {  // the own Winograd inside them at every channel count (as ops::Conv2d
         // runs it from 32 channels with Winograd asked for): the kernels' API
        namespace on = backend::onednn;
        on::winograd::Layer L;
        on::direct::Scratch sc;
        std::uint64_t v = 1;
        const double f = median_ms([&] {
          L.fwd.set_weights(wt.data(), fresh ? ++v : 1, s.c, s.c);
          const on::direct::ImageConv c = L.fwd.image_conv(int(s.h), int(s.h));
          on::direct::forward_images(g, x.data(), wt.data(), y.data(), sc, st.data(), nullptr, &c);
        });
        const auto map = bn.grad_map(dev, cg, y.data(), dz.data(), mean.data(), true);
        const double b = median_ms([&] {
          L.set_backward_weights(g, wt.data(), fresh ? ++v : 1);
          const on::direct::ImageConv c = L.bwd.image_conv(int(s.h), int(s.h));
          on::direct::backward_images(g, x.data(), map, nullptr, dx.data(), dw.data(), sc, nullptr, nullptr,
                                      &c);
        });
        std::printf("  winograd fwd %.3f bwd %.3f ms", f, b);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
}
