// bench/cli.hpp — the benchmarks' flag parsing: CLI11, as in the examples.
// --help prints the flags and exits 0; a bad flag or value prints CLI11's
// message naming it and exits 2 (the usage-error code), so scripts that run
// a benchmark stop on a typo instead of timing the defaults.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace bench {

/// Parses argv into `app`; nullopt to go on, else the exit code for main.
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

}  // namespace bench
