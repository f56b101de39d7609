// cifarnet/demo/synthetic_cifar.hpp — demo content (cifarnet/demo/ holds what
// the examples, tests and benchmarks show, not library parts): a small
// built-in CIFAR-shaped data set, so the examples run end to end with no
// download. It keeps the data:: namespace of the sets it makes.
//
// Each class has its own mean colour and a class-specific stripe pattern
// (orientation and frequency); every image adds a random phase, a random
// brightness shift and pixel noise. The classes are learnable but not
// trivially (a linear model on the raw pixels does not separate them all),
// and the same seed always gives the same bytes. It is NOT CIFAR-10: programs
// that use it say so.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "cifarnet/core/rng.hpp"
#include "cifarnet/data/image.hpp"

namespace cifarnet {
namespace data {

/// `n` synthetic 32×32×3 images in 10 classes (uint8, CHW), balanced.
inline ImageSet synthetic_cifar(std::size_t n, std::uint64_t seed, std::size_t classes = 10) {
  ImageSet set;
  set.geometry = {32, 32, 3};
  set.num_classes = classes;
  set.pixels.resize(n * set.geometry.size());
  set.labels.resize(n);
  for (std::size_t k = 0; k < classes; ++k) set.class_names.push_back("synthetic_" + std::to_string(k));
  Rng rng(seed);
  const double pi = 3.14159265358979323846;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i % classes;
    set.labels[i] = std::int32_t(c);
    const double angle = pi * double(c % 5) / 5.0;
    const double freq = 2.0 * pi * (c < 5 ? 2.0 : 4.0) / 32.0;
    const double phase = rng.uniform(0, 2 * pi);
    const double shift = rng.uniform(-30, 30);
    std::uint8_t* img = set.image(i);
    for (std::size_t ch = 0; ch < 3; ++ch) {
      const double base = 60.0 + 140.0 * double((c * 7 + ch * 3) % 10) / 9.0;
      for (std::size_t y = 0; y < 32; ++y)
        for (std::size_t x = 0; x < 32; ++x) {
          const double t = std::cos(angle) * double(x) + std::sin(angle) * double(y);
          double v = base + shift + 50.0 * std::sin(freq * t + phase) + rng.normal(0, 25);
          v = v < 0 ? 0 : v > 255 ? 255 : v;
          img[(ch * 32 + y) * 32 + x] = std::uint8_t(v + 0.5 > 255 ? 255 : v + 0.5);
        }
    }
  }
  return set;
}

}  // namespace data
}  // namespace cifarnet
