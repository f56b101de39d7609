// cifarnet/nn/pick_data_format.hpp — the activation layout that trains a
// network faster on this machine, measured.
//
// Which of NHWC (channels_last) and NCHW (channels_first) is faster depends
// on the backend, the CPU or GPU and the network's widths. This builds the
// network once per layout and times forward + backward (Mode::Train) on a
// constant batch: one warm-up step per layout (it creates the primitives),
// then `repetitions` timed steps, the layouts alternating step by step so
// both see the same machine; the median decides. Short runs on a noisy
// machine can still disagree from one start to the next, which is why
// programs default to a fixed rule (train::choose_data_format) and measure
// only when asked (`--data-format auto` in examples/resnet_cifar10), and a
// resumed job keeps the layout its checkpoint recorded.
//
//   const FormatPick p = pick_data_format<ResNetCifar<>, backend::OneDnn>({3, 32, 32}, resnet_options(20));
//   std::cout << p.describe() << "\n";   // "... channels_last 0.0410 s, channels_first 0.1620 s"
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/nn/context.hpp"
#include "cifarnet/nn/format_pick.hpp"
#include "cifarnet/nn/model.hpp"

namespace cifarnet {

/// Measures a training step of Model<Net, B> in both layouts; returns the
/// faster one with the timings. `repetitions` >= 1 timed steps per layout.
template <class Net, class B>
FormatPick pick_data_format(InputShape input, const NetOptions& options, std::size_t batch = 32,
                            int repetitions = 5) {
  if (batch == 0 || repetitions < 1)
    throw ConfigError("pick_data_format: batch and repetitions must be positive (batch " +
                      std::to_string(batch) + ", repetitions " + std::to_string(repetitions) + ")");
  struct Candidate {
    DataFormat format;
    std::unique_ptr<Model<Net, B>> net;
    Tensor<float> x, dlogits;
    std::vector<double> seconds;
  };
  std::vector<Candidate> cs;
  for (DataFormat f : {DataFormat::NHWC, DataFormat::NCHW}) {
    Candidate c{f, std::make_unique<Model<Net, B>>(input, f, options, 0), {}, {}, {}};
    c.x = make_tensor<float>({batch, input.c, input.h, input.w}, f);
    c.x.fill(0.5f);  // the speed does not depend on the values
    cs.push_back(std::move(c));
  }
  auto step = [](Candidate& c) {
    const Tensor<float>& logits = c.net->forward(c.x, Mode::Train);
    if (c.dlogits.shape() != logits.shape()) {
      c.dlogits.resize(logits.shape());
      c.dlogits.fill(1.0f / float(logits.size()));
    }
    c.net->backward(c.dlogits);
  };
  for (Candidate& c : cs) step(c);  // warm-up: creates the primitives
  for (int r = 0; r < repetitions; ++r)
    for (Candidate& c : cs) {
      const auto t0 = std::chrono::steady_clock::now();
      step(c);
      c.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  FormatPick p;
  p.batch = batch;
  p.repetitions = repetitions;
  double best = 0;
  for (Candidate& c : cs) {
    std::nth_element(c.seconds.begin(), c.seconds.begin() + long(c.seconds.size() / 2), c.seconds.end());
    const double median = c.seconds[c.seconds.size() / 2];
    p.timings.push_back({c.format, median});
    if (p.timings.size() == 1 || median < best) {
      best = median;
      p.format = c.format;
    }
  }
  return p;
}

}  // namespace cifarnet
