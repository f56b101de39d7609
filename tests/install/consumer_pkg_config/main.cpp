// Built with nothing but `pkg-config --cflags --libs cifarnet`
// (run_pkg_config.sh): the same small network on the oneDNN backend and on
// the reference backend (matrix products through xtensor-blas, so BLAS),
// from the same seed, must agree.
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>

#include <cmath>
#include <cstdio>

int main() {
  using namespace cifarnet;
  using Net = Sequential<Flatten, Dense<12, 5>, ReLU, Dense<5, 3>>;
  Model<Net, backend::OneDnn> onednn({3, 2, 2}, DataFormat::NHWC, {}, 7);
  Model<Net, backend::Reference> reference({3, 2, 2}, DataFormat::NHWC, {}, 7);
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({4, 3, 2, 2}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.normal());
  const Tensor<float> a = onednn.forward(x), b = reference.forward(x);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::fmax(worst, std::fabs(double(a.flat(i)) - b.flat(i)));
  std::printf("pkg-config consumer: %zu outputs, oneDNN against reference: max |diff| %.3g\n", a.size(),
              worst);
  return a.size() == 12 && worst < 1e-5 ? 0 : 1;
}
