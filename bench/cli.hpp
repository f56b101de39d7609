// bench/cli.hpp — the benchmarks' flag parsing: CLI11, as in the examples.
// --help prints the flags and exits 0; a bad flag or value prints CLI11's
// message naming it and exits 2 (the usage-error code), so scripts that run
// a benchmark stop on a typo instead of timing the defaults.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <cifarnet/ops/conv_algorithm.hpp>

namespace bench_cli {

/// Parses argv into `app`; nullopt to go on, else the exit code for main.
/// In a build with CIFARNET_BENCH_OPTIMIZATION set (bench/CMakeLists.txt:
/// CI's check that the benchmarks run) it says so first, on stderr.
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
#ifdef CIFARNET_BENCH_OPTIMIZED_AT
    std::fprintf(
        stderr,
        "note: built with CIFARNET_BENCH_OPTIMIZATION=%s (a build that only checks the benchmarks run): "
        "its times are not the library's\n",
        CIFARNET_BENCH_OPTIMIZED_AT);
#endif
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

/// "a,b,,c" -> {"a", "b", "c"}: the comma lists of --only and --formats.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

/// --conv-algorithm auto|direct|winograd and --precision fp32|bf16, straight
/// into the options the benchmark passes on (defaults: what they hold).
inline void add_conv_flags(CLI::App& app, cifarnet::ConvAlgorithm& alg, cifarnet::ConvPrecision& prec) {
  using cifarnet::ConvAlgorithm, cifarnet::ConvPrecision;
  const std::map<std::string, ConvAlgorithm> algs{{"auto", ConvAlgorithm::Auto},
                                                  {"direct", ConvAlgorithm::Direct},
                                                  {"winograd", ConvAlgorithm::Winograd}};
  const std::map<std::string, ConvPrecision> precs{{"fp32", ConvPrecision::F32},
                                                   {"bf16", ConvPrecision::BF16}};
  app.add_option("--conv-algorithm", alg, "Convolution algorithm: auto (the default), direct or winograd.")
      ->transform(CLI::CheckedTransformer(algs));
  app.add_option("--precision", prec, "Convolution arithmetic: fp32 (the default) or bf16.")
      ->transform(CLI::CheckedTransformer(precs));
}

}  // namespace bench_cli
