// Soft placement of a GPU count and the choice of a job's data format
// (train/placement.hpp): the rule, the job dir's record, and the texts.
#include <catch2/catch.hpp>

#include <cifarnet/io/checkpoint.hpp>
#include <cifarnet/train/placement.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <unistd.h>

using namespace cifarnet;
namespace fs = std::filesystem;

namespace {
struct JobDir {
  fs::path path;
  explicit JobDir(const std::string& name)
      : path(fs::temp_directory_path() / ("cifarnet_placement_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~JobDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

/// A checkpoint at `step` in `dir` whose metadata records `layout` ("" = none).
std::string save_checkpoint(const std::string& dir, std::int64_t step, const std::string& layout) {
  cifarnet::StateDict d;
  d.set<float>("w", {2}, std::vector<float>{1.f, 2.f});
  if (!layout.empty()) d.metadata[train::kDataFormatKey] = layout;
  io::CheckpointManager mgr(dir);
  return mgr.save(step, d);
}
}  // namespace

TEST_CASE("place_on_gpus: enough GPUs, soft placement onto fewer or none, and the hard error",
          "[placement]") {
  SECTION("enough GPUs: all asked for, no notice") {
    const auto p = train::place_on_gpus(2, 4, "", true);
    CHECK(p.used == 2);
    CHECK(p.notice.empty());
    CHECK(train::place_on_gpus(0, 0, "no CUDA device present", false).used == 0);
  }
  SECTION("none present: the CPU, said once") {
    const auto p = train::place_on_gpus(1, 0, "no CUDA device present", true);
    CHECK(p.requested == 1);
    CHECK(p.used == 0);
    CHECK(p.notice ==
          "Soft placement: --num-gpus 1 asked, but no GPU is available (no CUDA device present); training on "
          "the CPU instead (--no-soft-placement makes this an error).");
  }
  SECTION("fewer present: the ones there are") {
    const auto p = train::place_on_gpus(4, 2, "2 CUDA device(s) present", true);
    CHECK(p.used == 2);
    CHECK(p.notice.find("only 2 GPU(s) present; training on 2 GPU(s)") != std::string::npos);
  }
  SECTION("without soft placement: errors naming the flag") {
    CHECK_THROWS_WITH(train::place_on_gpus(1, 0, "no CUDA device present", false),
                      Catch::Contains("--num-gpus 1: GPUs were requested but none is available (no CUDA "
                                      "device present). Use --num-gpus 0"));
    CHECK_THROWS_WITH(train::place_on_gpus(3, 2, "", false, "--gpus"),
                      Catch::Contains("--gpus 3: 2 GPU(s) present. Ask for at most 2"));
    CHECK_THROWS_AS(train::place_on_gpus(-1, 0, "", true), ConfigError);
  }
}

TEST_CASE("choose_data_format with a measure (--data-format auto): new jobs only", "[placement]") {
  JobDir job("measure");
  int calls = 0;
  const std::function<FormatPick()> measure = [&] {
    ++calls;
    FormatPick p;
    p.format = DataFormat::NCHW;
    p.batch = 8;
    p.repetitions = 3;
    p.timings = {{DataFormat::NHWC, 0.25}, {DataFormat::NCHW, 0.125}};
    return p;
  };
  SECTION("a new job takes what the measure picked, and says what it measured") {
    const auto c = train::choose_data_format(std::nullopt, false, job.str(), measure);
    CHECK(calls == 1);
    CHECK(c.format == DataFormat::NCHW);
    CHECK(c.source == train::FormatSource::Measured);
    CHECK(c.describe() ==
          "Data format: channels_first (measured a training step of batch 8, median of 3: channels_last "
          "0.2500 s, channels_first 0.1250 s)");
  }
  SECTION("a resume keeps the checkpoint's layout without measuring") {
    save_checkpoint(job.str(), 4, "channels_last");
    const auto c = train::choose_data_format(std::nullopt, false, job.str(), measure);
    CHECK(calls == 0);
    CHECK(c.format == DataFormat::NHWC);
    CHECK(c.source == train::FormatSource::JobDir);
  }
  SECTION("a given layout wins without measuring") {
    const auto c = train::choose_data_format(DataFormat::NHWC, false, job.str(), measure);
    CHECK(calls == 0);
    CHECK(c.source == train::FormatSource::Given);
  }
}

TEST_CASE("choose_data_format: given, else the job dir's record, else the device's default", "[placement]") {
  JobDir job("choose");
  SECTION("a new job: the rule, deterministic") {
    for (int i = 0; i < 3; ++i) {
      const auto cpu = train::choose_data_format(std::nullopt, false, job.str());
      CHECK(cpu.format == DataFormat::NHWC);
      CHECK(cpu.source == train::FormatSource::DefaultCpu);
      CHECK(cpu.describe() == "Data format: channels_last (default for training on the CPU)");
    }
    const auto gpu = train::choose_data_format(std::nullopt, true, job.str());
    CHECK(gpu.format == DataFormat::NCHW);
    CHECK(gpu.describe() == "Data format: channels_first (default for training on GPUs)");
    CHECK_FALSE(fs::exists(job.path));  // choosing reads, it creates nothing
  }
  SECTION("a resume takes the newest checkpoint's layout, whatever the device") {
    save_checkpoint(job.str(), 1, "channels_last");
    const std::string newest = save_checkpoint(job.str(), 2, "channels_first");
    const auto c = train::choose_data_format(std::nullopt, false, job.str());
    CHECK(c.format == DataFormat::NCHW);
    CHECK(c.source == train::FormatSource::JobDir);
    CHECK_FALSE(c.changes_layout());
    CHECK(c.describe() == "Data format: channels_first (from the job dir: recorded in " + newest + ")");
  }
  SECTION("given equal to the checkpoint's: no change said") {
    save_checkpoint(job.str(), 1, "channels_last");
    const auto c = train::choose_data_format(DataFormat::NHWC, true, job.str());
    CHECK(c.format == DataFormat::NHWC);
    CHECK_FALSE(c.changes_layout());
    CHECK(c.describe() == "Data format: channels_last (given by --data-format)");
  }
  SECTION("given and different from the checkpoint's: allowed, and said") {
    const std::string ckpt = save_checkpoint(job.str(), 7, "channels_first");
    const auto c = train::choose_data_format(DataFormat::NHWC, false, job.str());
    CHECK(c.format == DataFormat::NHWC);
    CHECK(c.changes_layout());
    CHECK_THAT(c.describe(),
               Catch::StartsWith("Data format: channels_last (given by --data-format; the job's "
                                 "checkpoint " +
                                 ckpt +
                                 " was trained in channels_first: resuming in a different "
                                 "layout, as asked"));
  }
  SECTION("a checkpoint without the record (older files): the default, and said") {
    const std::string ckpt = save_checkpoint(job.str(), 3, "");
    const auto c = train::choose_data_format(std::nullopt, false, job.str());
    CHECK(c.format == DataFormat::NHWC);
    CHECK(c.source == train::FormatSource::DefaultCpu);
    CHECK(c.describe() ==
          "Data format: channels_last (default for training on the CPU; the job's checkpoint " + ckpt +
              " records no layout)");
  }
  SECTION("a bad record is an error naming the file") {
    const std::string ckpt = save_checkpoint(job.str(), 4, "sideways");
    CHECK_THROWS_WITH(train::choose_data_format(std::nullopt, false, job.str()),
                      Catch::Contains(ckpt) && Catch::Contains("'data_format' = 'sideways'"));
  }
}

TEST_CASE("data_format_saveable records the layout in the checkpoint metadata", "[placement]") {
  cifarnet::StateDict d;
  train::data_format_saveable(DataFormat::NCHW)->save(d);
  CHECK(d.metadata.at("data_format") == "channels_first");
  CHECK(train::recorded_data_format(d) == DataFormat::NCHW);
  cifarnet::StateDict none;
  CHECK_FALSE(train::recorded_data_format(none).has_value());
  CHECK_NOTHROW(train::data_format_saveable(DataFormat::NHWC)->load(d));
}
