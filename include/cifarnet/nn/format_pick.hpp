// cifarnet/nn/format_pick.hpp — what measuring the activation layouts found
// (nn/pick_data_format.hpp measures; train::choose_data_format takes the
// result for a new job under `--data-format auto`).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cifarnet/core/tensor.hpp"

namespace cifarnet {

/// One layout's measured training step.
struct FormatTiming {
  DataFormat format = DataFormat::NHWC;
  double seconds = 0;  ///< median wall time of a forward + backward step
};

/// The faster layout and the timings that chose it.
struct FormatPick {
  DataFormat format = DataFormat::NHWC;
  std::size_t batch = 0;  ///< the batch size measured
  int repetitions = 0;    ///< timed steps per layout (after one warm-up step each)
  std::vector<FormatTiming> timings;

  /// E.g. "measured a training step of batch 32, median of 5: channels_last 0.041 s, channels_first 0.162 s".
  std::string describe() const {
    std::string s = "measured a training step of batch " + std::to_string(batch) + ", median of " +
                    std::to_string(repetitions) + ":";
    for (std::size_t i = 0; i < timings.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s %s %.4f s", i ? "," : "", layout_name(timings[i].format),
                    timings[i].seconds);
      s += buf;
    }
    return s;
  }
};

}  // namespace cifarnet
