// Per-layer profile of the airbench94 training step as the speedrun runs it
// after its whitening-bias epochs (batch 2000, whiten frozen), bf16.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/airbench.hpp>
#include <cifarnet/recipes/airbench.hpp>
using namespace cifarnet;
int main(int argc, char** argv) {
  const std::size_t batch = argc > 1 ? std::atoi(argv[1]) : 2000;
  const bool bias_trains = argc > 2 && std::atoi(argv[2]);
  const int steps = argc > 3 ? std::atoi(argv[3]) : 4;
  NetOptions nopts = airbench_options();
  nopts.with_conv_precision(ConvPrecision::BF16);
  Model<Airbench94, backend::OneDnn> net({3, 32, 32}, DataFormat::NHWC, nopts, 0);
  auto& P = net.parameters();
  P.set_requires_grad(P.id("whiten/weights"), false);
  if (!bias_trains) P.set_requires_grad(P.id("whiten/biases"), false);
  Tensor<float> x({batch, 32, 32, 3});
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
  std::vector<int> labels(batch);
  for (auto& l : labels) l = int(rng() % 10);
  Tensor<float> dl;
  const CrossEntropyOptions ce{0.2f, Reduction::Sum};
  auto step = [&] {
    const Tensor<float>& z = net.forward(x, Mode::Train);
    softmax_cross_entropy(z, labels, ce, &dl);
    net.backward(dl);
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> ts;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  std::sort(ts.begin(), ts.end());
  std::printf("batch %zu, whiten bias %s: %.2f ms/step (median of 5), %.1f img/s\n", batch,
              bias_trains ? "trains" : "frozen", ts[2] * 1e3, batch / ts[2]);
  Profiler prof;
  net.set_profiler(&prof);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double per = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  net.set_profiler(nullptr);
  double tot = 0;
  for (const auto& e : prof.entries()) {
    std::printf("  %-24s %-10s %8.2f %8.2f\n", e.name.c_str(), e.kind.c_str(), e.forward * 1e3 / steps,
                e.backward * 1e3 / steps);
    tot += e.forward + e.backward;
  }
  std::printf("booked %.2f of %.2f ms\n", tot * 1e3 / steps, per * 1e3);
}
