// examples/common/run_main.hpp — the end of every example's main(): parse
// the flags (CLI11 prints --help and flag errors itself, with its own exit
// status), then run the program's body with the examples' error convention:
// a ConfigError (bad flag values) exits with 2, any other cifarnet::Error
// with 1, each with "<program>: <message>" on stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <utility>

#include <cifarnet/core/error.hpp>

namespace examples {

/// Runs `body` (returning the exit status) with the error convention above.
template <class F>
int run_main(const char* program, F&& body) {
  try {
    return body();
  } catch (const cifarnet::ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (const cifarnet::Error& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
}

/// Parses the flags into `app`, then run_main(program, body).
template <class F>
int parse_and_run(CLI::App& app, int argc, char** argv, const char* program, F&& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run_main(program, std::forward<F>(body));
}

}  // namespace examples
