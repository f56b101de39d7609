#include <cifarnet/backend/onednn.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "dnnl.hpp"
using namespace cifarnet;
using namespace dnnl;
int main() {
  Device<backend::OneDnn> cdev;
  ops::BatchNorm<backend::OneDnn, float> bn;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  for (auto [c, hw] : {std::pair{16, 32}, {32, 16}, {64, 8}}) {
    const int N = 128;
    ChannelGeom g{DataFormat::NHWC, 128, size_t(c), size_t(hw), size_t(hw)};
    std::vector<float> x(g.size()), y(g.size()), z(g.size()), w(9 * c * c, 0.01f), gamma(c, 1.f),
        beta(c, 0.f), mean(c), var(c);
    std::vector<float> big(64 << 20, 1.f);  // 256 MB to flush
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % 1000) / 500.f - 1.f;
    memory::desc sd({N, c, hw, hw}, memory::data_type::f32, memory::format_tag::nhwc);
    memory::desc wd({c, c, 3, 3}, memory::data_type::f32, memory::format_tag::any);
    memory::desc wu({c, c, 3, 3}, memory::data_type::f32, memory::format_tag::hwio);
    convolution_forward::desc d(prop_kind::forward_training, algorithm::convolution_direct, sd, wd, sd,
                                {1, 1}, {1, 1}, {1, 1});
    convolution_forward::primitive_desc pd(d, eng);
    memory xm(sd, eng, x.data()), ym(sd, eng, y.data()), wum(wu, eng, w.data()), wm(pd.weights_desc(), eng);
    reorder(wum, wm).execute(s, wum, wm);
    convolution_forward cf(pd);
    std::vector<double> tc, tb, tbh, tcold;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      cf.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
      s.wait();
      auto t1 = std::chrono::steady_clock::now();
      bn.forward_train(cdev, g, 1e-5, y.data(), gamma.data(), beta.data(), z.data(), mean.data(), var.data(),
                       true);
      auto t2 = std::chrono::steady_clock::now();
      bn.forward_train(cdev, g, 1e-5, y.data(), gamma.data(), beta.data(), z.data(), mean.data(), var.data(),
                       true);
      auto t3 = std::chrono::steady_clock::now();
      float acc = 0;
#pragma omp parallel for reduction(+ : acc)
      for (size_t i = 0; i < big.size(); i += 16) {
        big[i] += 1.f;
        acc += big[i];
      }
      auto t4 = std::chrono::steady_clock::now();
      bn.forward_train(cdev, g, 1e-5, y.data(), gamma.data(), beta.data(), z.data(), mean.data(), var.data(),
                       true);
      auto t5 = std::chrono::steady_clock::now();
      tc.push_back(std::chrono::duration<double>(t1 - t0).count() * 1e3);
      tb.push_back(std::chrono::duration<double>(t2 - t1).count() * 1e3);
      tbh.push_back(std::chrono::duration<double>(t3 - t2).count() * 1e3);
      tcold.push_back(std::chrono::duration<double>(t5 - t4).count() * 1e3 + acc * 0);
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    printf("C=%d: conv %.3f ms, bn after conv %.3f ms, bn again (hot) %.3f ms, bn after flush %.3f ms\n", c,
           med(tc), med(tb), med(tbh), med(tcold));
  }
}
