// step_numerics — one ResNet training step on oneDNN (or, with --backend
// reference, the reference backend) in float against the reference backend
// in double (tests/backend/step_numerics.hpp), printed tensor by tensor: the error of every gradient and BN
// moving statistic, relative to the tensor's largest exact element (max and median).
//
//   OMP_NUM_THREADS=1 build/tests/backend/step_numerics [--depth 20] [--batch 128]
//       [--formats nhwc,nchw] [--data-dir ../shared/data/cifar-10-batches-bin]
//
// With --data-dir the batch is the first --batch images of data_batch_1.bin;
// without, random pixels and labels.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <sstream>

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/data/cifar.hpp>

#include "step_numerics.hpp"

using namespace cifarnet;

int main(int argc, char** argv) {
  int depth = 20;
  std::size_t batch = 128;
  std::string formats = "nhwc,nchw", data_dir, backend_name = "onednn";
  bool all = false;
  CLI::App app{"One ResNet training step, oneDNN float vs reference double"};
  app.add_option("--depth", depth, "ResNet depth (6n+2)")->capture_default_str();
  app.add_option("--batch", batch, "batch size")->capture_default_str();
  app.add_option("--formats", formats, "comma-separated layouts (nhwc, nchw)")->capture_default_str();
  app.add_option("--data-dir", data_dir, "cifar-10-batches-bin: use the first images of data_batch_1.bin");
  app.add_option(
         "--backend", backend_name,
         "backend under test in float: onednn, or reference (plain loops with double sums: what float "
         "storage alone costs)")
      ->check(CLI::IsMember({"onednn", "reference"}))
      ->capture_default_str();
  app.add_flag("--all", all, "print every tensor (default: a summary per layer kind and stage)");
  CLI11_PARSE(app, argc, argv);
  try {
    test::StepBatch b;
    if (data_dir.empty()) {
      b = test::random_step_batch(batch, 11);
      std::printf("batch: %zu random images\n", batch);
    } else {
      const data::ImageSet set = data::read_cifar10_file(data_dir + "/data_batch_1.bin");
      if (set.size() < batch) throw ConfigError("--batch larger than the data set");
      b.n = batch;
      for (std::size_t i = 0; i < batch; ++i) {
        const std::uint8_t* p = set.image(i);
        for (std::size_t k = 0; k < 3 * 32 * 32; ++k) b.nchw.push_back(float(p[k]));
        b.labels.push_back(set.labels[i]);
      }
      std::printf("batch: the first %zu images of %s/data_batch_1.bin\n", batch, data_dir.c_str());
    }
    std::vector<DataFormat> fmts;
    std::stringstream ss(formats);
    for (std::string f; std::getline(ss, f, ',');) fmts.push_back(parse_data_format(f));
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = backend_name == "reference"
                            ? test::compare_resnet_step<backend::Reference>(depth, fmts, b)
                            : test::compare_resnet_step<backend::OneDnn>(depth, fmts, b);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("(%.1f s)\n", secs);
    for (std::size_t fi = 0; fi < fmts.size(); ++fi) {
      const DataFormat fmt = fmts[fi];
      const auto& e = errors[fi];
      std::printf("\n== ResNet-%d, batch %zu, %s, %s float vs reference double\n", depth, batch,
                  to_string(fmt), backend_name.c_str());
      std::printf("%-44s %9s %9s %9s\n", "tensor", "max", "median", "max|g64|");
      auto row = [](const test::TensorError& t) {
        std::printf("%-44s %9.2e %9.2e %9.2e\n", t.name.c_str(), t.max, t.median, t.scale);
      };
      row(e.loss);
      row(e.logits);
      if (all) {
        for (const auto& t : e.grads) row(t);
        for (const auto& t : e.state) row(t);
        continue;
      }
      // Summary: worst max and the range of medians per (stage, kind).
      struct Group {
        std::string key;
        double worst = 0, med_lo = 1e300, med_hi = 0;
        std::string worst_name;
      };
      std::vector<Group> groups;
      auto add = [&](const test::TensorError& t, const std::string& what) {
        const std::string stage = t.name.substr(0, t.name.find('/'));
        const std::string kind = t.name.substr(t.name.rfind('/') + 1);
        const std::string key =
            what + " " + (stage.rfind("stage", 0) == 0 ? stage : std::string("stem/head")) + " " + kind;
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
        if (it == groups.end()) {
          groups.push_back(Group{key, 0, 1e300, 0, ""});
          it = groups.end() - 1;
        }
        if (t.max >= it->worst) {
          it->worst = t.max;
          it->worst_name = t.name;
        }
        it->med_lo = std::min(it->med_lo, t.median);
        it->med_hi = std::max(it->med_hi, t.median);
      };
      for (const auto& t : e.grads) add(t, "grad");
      for (const auto& t : e.state) add(t, "state");
      std::printf("\n%-34s %9s %-19s %s\n", "group", "worst max", "median range", "worst tensor");
      for (const auto& g : groups)
        std::printf("%-34s %9.2e %8.2e-%8.2e  %s\n", g.key.c_str(), g.worst, g.med_lo, g.med_hi,
                    g.worst_name.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_numerics: %s\n", e.what());
    return 1;
  }
  return 0;
}
