// cifarnet/train/trace.hpp — one training step's ops as a Chrome trace
// (TF-Slim's trace_every_n_steps, which writes <logdir>/tf_trace-<step>.json
// from TensorFlow's timeline).
//
// The file is the Trace Event Format that chrome://tracing and Perfetto
// (ui.perfetto.dev) open: {"traceEvents": [...], "displayTimeUnit": "ms"}
// with one complete event ("ph": "X", "ts" and "dur" in microseconds) per
// layer call the Profiler recorded (nn/profile.hpp), named by the layer's full
// name ("stage1/block0/conv1"), "cat" forward or backward, the layer kind in
// "args", plus the Trainer's own phases (the whole forward and backward,
// softmax cross-entropy, gradient sync, regularization, numerics check,
// optimizer, update ops, the step). A model without a profiler hook
// (distributed::Towers) has the Trainer's phases only. Forward and backward calls are on two rows (tid 1 and
// 2), the Trainer's phases on a third (tid 0), under one process named after the step.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cifarnet/io/file.hpp"
#include "cifarnet/nn/profile.hpp"

namespace cifarnet::train {

/// Row (tid) of an event in the trace: the Trainer's phases, forward, backward.
enum class TraceRow { Step = 0, Forward = 1, Backward = 2 };

/// The Chrome trace of the events `p` recorded (Profiler::record_events);
/// events of kind "step" go on the Trainer's row.
inline nlohmann::json chrome_trace(const Profiler& p, std::int64_t global_step) {
  using nlohmann::json;
  json events = json::array();
  const std::string process = "cifarnet training step " + std::to_string(global_step);
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", process}}}});
  const std::pair<TraceRow, const char*> rows[] = {
      {TraceRow::Step, "trainer"}, {TraceRow::Forward, "forward"}, {TraceRow::Backward, "backward"}};
  for (const auto& [row, name] : rows)
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", int(row)}, {"args", {{"name", name}}}});
  for (const auto& e : p.events()) {
    const TraceRow row =
        e.kind == "step" ? TraceRow::Step : (e.backward ? TraceRow::Backward : TraceRow::Forward);
    events.push_back({{"name", e.name},
                      {"cat", e.kind == "step" ? "trainer" : (e.backward ? "backward" : "forward")},
                      {"ph", "X"},
                      {"ts", e.start * 1e6},
                      {"dur", e.duration * 1e6},
                      {"pid", 0},
                      {"tid", int(row)},
                      {"args", {{"kind", e.kind}, {"global_step", global_step}}}});
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

/// Writes chrome_trace(p, global_step) to `path` atomically (io::IoError
/// naming the file when it cannot).
inline void write_chrome_trace(const std::string& path, const Profiler& p, std::int64_t global_step) {
  const std::string text = chrome_trace(p, global_step).dump(1);
  io::write_file_atomic(path, text.data(), text.size(), /*durable=*/false);
}

}  // namespace cifarnet::train
