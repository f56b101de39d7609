// cifarnet/train/placement.hpp — where a training job runs and in which
// activation layout, decided the same way by every process of the job.
//
// Two decisions the seed programs make at start-up:
// - Devices (soft placement). TF 1.x sessions built with
//   allow_soft_placement=True run an op on another device when the one asked
//   for does not exist. place_on_gpus() does the same for a GPU count: with
//   fewer GPUs present than asked for, it uses the ones there are (the CPU when
//   there are none) and says so once; with soft placement off it is an error.
// - The data format. The seed's rule is deterministic: channels_first when
//   training on GPUs, channels_last on the CPU. A job records its layout in
//   every checkpoint (metadata "data_format"), and a process that resumes it
//   takes the layout from there, so a job never changes layout by accident
//   (results depend, in the last bits, on the layout). A layout given
//   explicitly wins, and a difference from the checkpoint's is reported.
//
//   auto gpus = train::place_on_gpus(requested, present, "no CUDA device", /*soft=*/true);
//   auto fmt = train::choose_data_format(given, gpus.used > 0, job_dir);
//   std::cout << fmt.describe() << "\n";           // "Data format: channels_last (default for the CPU)"
//   trainer.add_state(train::data_format_saveable(fmt.format));
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/tensor.hpp"
#include "cifarnet/io/checkpoint_manager.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/nn/format_pick.hpp"
#include "cifarnet/train/state.hpp"

namespace cifarnet::train {

// ------------------------------------------------------------ devices

/// What place_on_gpus() decided.
struct GpuPlacement {
  int requested = 0;   ///< GPUs asked for
  int used = 0;        ///< GPUs the job runs on (0: the CPU)
  std::string notice;  ///< set when `used` differs from `requested`: one line saying so and why
};

/// Places a job that asks for `requested` GPUs on a machine with `present`
/// (`why_none` says why there are not more, e.g. "no CUDA device present").
/// Enough GPUs: all requested are used. Fewer: with `soft`, the ones present
/// are used (the CPU when none) and `notice` says so; without, ConfigError
/// naming `flag`.
inline GpuPlacement place_on_gpus(int requested, int present, const std::string& why_none, bool soft,
                                  const std::string& flag = "--num-gpus") {
  if (requested < 0)
    throw ConfigError(flag + " must be 0 or a positive integer, got " + std::to_string(requested));
  GpuPlacement p;
  p.requested = requested;
  p.used = requested;
  if (present >= requested) return p;
  const std::string asked = flag + " " + std::to_string(requested);
  if (!soft) {
    if (present <= 0)
      throw ConfigError(asked + ": GPUs were requested but none is available (" + why_none + "). Use " +
                        flag +
                        " 0 to train on the CPU, or drop --no-soft-placement to fall back "
                        "to it.");
    throw ConfigError(asked + ": " + std::to_string(present) + " GPU(s) present. Ask for at most " +
                      std::to_string(present) + ", or drop --no-soft-placement to use the ones present.");
  }
  p.used = present > 0 ? present : 0;
  p.notice = "Soft placement: " + asked + " asked, but " +
             (present <= 0 ? "no GPU is available (" + why_none + "); training on the CPU instead"
                           : "only " + std::to_string(present) + " GPU(s) present; training on " +
                                 std::to_string(present) + " GPU(s)") +
             " (--no-soft-placement makes this an error).";
  return p;
}

// ------------------------------------------------------------ data format

/// The checkpoint metadata key that records the layout a job trains in.
inline constexpr const char* kDataFormatKey = "data_format";

/// The layout recorded in a checkpoint's metadata; nullopt when it has none
/// (checkpoints written before the key existed). DataError naming the file
/// when the value is not a layout.
inline std::optional<DataFormat> recorded_data_format(const StateDict& d) {
  const auto it = d.metadata.find(kDataFormatKey);
  if (it == d.metadata.end()) return std::nullopt;
  try {
    return parse_data_format(it->second);
  } catch (const ConfigError&) {
    throw DataError("checkpoint " + io::detail::source_of(d) + ": metadata '" + kDataFormatKey + "' = '" +
                    it->second + "' (expected channels_first or channels_last)");
  }
}

/// Why a job uses its layout.
enum class FormatSource {
  Given,       ///< by the user (a flag)
  JobDir,      ///< recorded in the checkpoint the job resumes from
  DefaultCpu,  ///< the rule's default for training on the CPU (channels_last)
  DefaultGpu,  ///< the rule's default for training on GPUs (channels_first)
  Measured,    ///< a new job's layout measured (pick_data_format: `--data-format auto`)
};

/// What choose_data_format() decided, and what it saw.
struct FormatChoice {
  DataFormat format = DataFormat::NHWC;
  FormatSource source = FormatSource::DefaultCpu;
  std::optional<DataFormat> checkpoint;  ///< the layout of the checkpoint resumed from, if recorded
  std::string checkpoint_path;           ///< that checkpoint ("" when the job dir has none)
  std::string flag = "--data-format";    ///< the flag a given layout came from
  std::optional<FormatPick> measured;    ///< what measuring found (FormatSource::Measured)

  /// A given layout that differs from the checkpoint's: the job changes
  /// layout at this resume, because the user asked for it.
  bool changes_layout() const { return checkpoint && *checkpoint != format; }

  /// One line: the layout and why, e.g. "Data format: channels_last (default
  /// for training on the CPU)".
  std::string describe() const {
    std::string why;
    switch (source) {
      case FormatSource::Given:
        why = "given by " + flag;
        if (changes_layout())
          why += "; the job's checkpoint " + checkpoint_path + " was trained in " + layout_name(*checkpoint) +
                 ": resuming in a different layout, as asked (results differ in the last bits from an "
                 "uninterrupted run)";
        break;
      case FormatSource::JobDir:
        why = "from the job dir: recorded in " + checkpoint_path;
        break;
      case FormatSource::DefaultCpu:
        why = "default for training on the CPU";
        break;
      case FormatSource::DefaultGpu:
        why = "default for training on GPUs";
        break;
      case FormatSource::Measured:
        why = measured ? measured->describe() : std::string("measured");
        break;
    }
    if (source != FormatSource::JobDir && source != FormatSource::Given && !checkpoint_path.empty())
      why += "; the job's checkpoint " + checkpoint_path + " records no layout";
    return std::string("Data format: ") + layout_name(format) + " (" + why + ")";
  }
};

/// The layout of a job: `given` when set; else the one recorded in the
/// newest readable checkpoint in `job_dir`; else, for a new job, what
/// `measure` picks when given (nn/pick_data_format.hpp: `--data-format
/// auto`), or channels_first when training on GPUs and channels_last on the
/// CPU. Reads the job dir only (a missing or empty one is a new job). A job
/// dir whose checkpoints are all unreadable is left to the resume to report;
/// the default applies here.
inline FormatChoice choose_data_format(std::optional<DataFormat> given, bool on_gpus,
                                       const std::string& job_dir,
                                       const std::function<FormatPick()>& measure = nullptr) {
  FormatChoice c;
  std::error_code ec;
  if (!job_dir.empty() && std::filesystem::is_directory(job_dir, ec)) {
    const io::CheckpointManager mgr(job_dir);
    std::optional<io::RestoreResult> latest;
    try {
      latest = mgr.restore_latest();
    } catch (const DataError&) {  // none readable: the resume says so, with every file's fault
    }
    if (latest) {
      c.checkpoint_path = latest->checkpoint.path;
      c.checkpoint = recorded_data_format(latest->dict);
    }
  }
  if (given) {
    c.format = *given;
    c.source = FormatSource::Given;
  } else if (c.checkpoint) {
    c.format = *c.checkpoint;
    c.source = FormatSource::JobDir;
  } else if (measure) {
    c.measured = measure();
    c.format = c.measured->format;
    c.source = FormatSource::Measured;
  } else {
    c.format = on_gpus ? DataFormat::NCHW : DataFormat::NHWC;
    c.source = on_gpus ? FormatSource::DefaultGpu : FormatSource::DefaultCpu;
  }
  return c;
}

/// Records `format` in every checkpoint the trainer saves (metadata
/// "data_format"). Loading checks nothing: choose_data_format() has already
/// read the value and reported a change.
inline std::shared_ptr<Saveable> data_format_saveable(DataFormat format) {
  return std::make_shared<FunctionSaveable>(
      [format](StateDict& d) { d.metadata[kDataFormatKey] = layout_name(format); },
      [](const StateDict& d) { (void)recorded_data_format(d); });
}

}  // namespace cifarnet::train
