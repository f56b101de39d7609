// cifarnet/train/hooks.hpp — the standard training hooks, after TensorFlow's:
//
//   LoggingHook(every_n)            "step = 100, loss = 2.2, learning_rate = 0.1 (4.1 sec)"
//                                   (LoggingTensorHook of the ResNet seed)
//   ExamplesPerSecondHook(every_n)  "Average examples/sec: 601.2 (612.9), step = 20"
//                                   (the seed's ExamplesPerSecondHook: average since
//                                   the first logged step, and the current window)
//   StepLogHook(every_n)            the tutorial's "2017-08-04 10:32:05.123456: step 10,
//                                   loss = 4.67 (350.1 examples/sec; 0.366 sec/batch)"
//   SlimLogHook(every_n = 1)        TF-Slim's train_step line, every step by default:
//                                   "global step 10: loss = 4.6712 (0.366 sec/step)"
//   CheckpointHook(manager, steps, secs)  saves every N steps and/or seconds, and at the end
//   SummaryHook(writer, every_n)    scalars (loss, total_loss, learning_rate, global_step/sec,
//                                   examples/sec) and, every hist_every steps, histograms of
//                                   every trainable parameter and its gradient; at most once
//                                   every TrainerOptions::save_summaries_secs seconds when set
//   ProgressBarHook()               a progress bar with ETA when stderr is a terminal
//   LambdaHook(f)                   f(trainer, result) after each step
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "cifarnet/io/checkpoint_manager.hpp"
#include "cifarnet/io/parameter_state.hpp"
#include "cifarnet/io/tfevents.hpp"
#include "cifarnet/train/trainer.hpp"

namespace cifarnet::train {

namespace detail {
using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
/// "Every N steps" on the global step: due at the first step at or past each
/// multiple of N. Steps advance one at a time in one process, so that is
/// step % N == 0; an asynchronous worker's global step jumps by the other
/// workers' updates, and a multiple it skips still triggers once.
class EveryNSteps {
 public:
  explicit EveryNSteps(std::int64_t n) : n_(n) {}
  /// Where counting starts (the global step at begin()).
  void reset(std::int64_t step) { prev_ = step; }
  /// Whether `step` (after the previous call's, or reset()'s) is due.
  bool due(std::int64_t step) {
    const bool d = n_ > 0 && (step % n_ == 0 || (prev_ >= 0 && step > prev_ && step / n_ > prev_ / n_));
    prev_ = step;
    return d;
  }

 private:
  std::int64_t n_, prev_ = -1;
};
}  // namespace detail

/// Python's str(datetime.now()), local time: "2017-08-04 10:32:05.123456"
/// (the time stamp of the tutorial's log lines).
inline std::string datetime_now() {
  const auto t = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lld", static_cast<long long>(us));
  return buf;
}

/// Logs step, loss and learning rate every N steps (and on the first step).
class LoggingHook : public Hook {
 public:
  explicit LoggingHook(std::int64_t every_n = 100, std::ostream& out = std::cout) : n_(every_n), out_(&out) {}
  void begin(TrainerBase& t) override {
    last_ = detail::Clock::now();
    n_.reset(t.global_step());
  }
  void after_step(TrainerBase&, const StepResult& r) override {
    if (!n_.due(r.step) && !first_) return;
    first_ = false;
    std::ostringstream os;
    os << "step = " << r.step << ", loss = " << std::setprecision(6) << r.total_loss
       << ", learning_rate = " << r.learning_rate << " (" << std::fixed << std::setprecision(3)
       << detail::seconds_since(last_) << " sec)\n";
    *out_ << os.str() << std::flush;
    last_ = detail::Clock::now();
  }

 private:
  detail::EveryNSteps n_;
  std::ostream* out_;
  bool first_ = true;
  detail::Clock::time_point last_;
};

/// The ResNet seed's ExamplesPerSecondHook: every N steps prints the average
/// examples/sec since the first window and the current window's rate.
class ExamplesPerSecondHook : public Hook {
 public:
  explicit ExamplesPerSecondHook(std::int64_t every_n = 10, std::ostream& out = std::cout)
      : n_(every_n), out_(&out) {}
  void begin(TrainerBase& t) override {
    window_start_ = detail::Clock::now();
    n_.reset(t.global_step());
  }
  void after_step(TrainerBase&, const StepResult& r) override {
    window_examples_ += double(r.batch_size);
    ++window_steps_;
    if (!n_.due(r.step)) return;
    const double dt = detail::seconds_since(window_start_);
    const double current = dt > 0 ? window_examples_ / dt : 0.0;
    total_time_ += dt;
    total_examples_ += window_examples_;
    const double average = total_time_ > 0 ? total_examples_ / total_time_ : 0.0;
    last_average_ = average;
    last_current_ = current;
    std::ostringstream os;
    os << "Average examples/sec: " << std::setprecision(6) << average << " (" << current
       << "), step = " << r.step << "\n";
    *out_ << os.str() << std::flush;
    window_examples_ = 0;
    window_steps_ = 0;
    window_start_ = detail::Clock::now();
  }
  double average() const { return last_average_; }
  double current() const { return last_current_; }

 private:
  detail::EveryNSteps n_;
  std::ostream* out_;
  detail::Clock::time_point window_start_;
  double window_examples_ = 0, total_examples_ = 0, total_time_ = 0, last_average_ = 0, last_current_ = 0;
  std::int64_t window_steps_ = 0;
};

/// The tutorial's log line every N steps:
/// "<time>: step 10, loss = 4.67 (350.1 examples/sec; 0.366 sec/batch)".
class StepLogHook : public Hook {
 public:
  explicit StepLogHook(std::int64_t every_n = 10, std::ostream& out = std::cout) : n_(every_n), out_(&out) {}
  void begin(TrainerBase&) override { start_ = detail::Clock::now(); }
  void after_step(TrainerBase&, const StepResult& r) override {
    ++steps_;
    examples_ += double(r.batch_size);
    if (r.step % n_ != 0) return;
    const double dt = detail::seconds_since(start_);
    char line[200];
    std::snprintf(line, sizeof line, "%s: step %lld, loss = %.2f (%.1f examples/sec; %.3f sec/batch)\n",
                  datetime_now().c_str(), static_cast<long long>(r.step), r.total_loss,
                  dt > 0 ? examples_ / dt : 0.0, steps_ ? dt / double(steps_) : 0.0);
    *out_ << line << std::flush;
    steps_ = 0;
    examples_ = 0;
    start_ = detail::Clock::now();
  }

 private:
  std::int64_t n_;
  std::ostream* out_;
  detail::Clock::time_point start_;
  std::int64_t steps_ = 0;
  double examples_ = 0;
};

/// TF-Slim's train_step log line, "global step 10: loss = 4.6712 (0.366
/// sec/step)": the global step after the step, the total loss and that
/// step's wall time, at every global step that is a multiple of `every_n`
/// (Slim's log_every_n_steps, default 1: every step; 0: never).
class SlimLogHook : public Hook {
 public:
  explicit SlimLogHook(std::int64_t every_n = 1, std::ostream& out = std::cout) : n_(every_n), out_(&out) {
    if (every_n < 0)
      throw ConfigError("SlimLogHook: log_every_n_steps must be >= 0, got " + std::to_string(every_n));
  }
  void after_step(TrainerBase&, const StepResult& r) override {
    if (n_ == 0 || r.step % n_ != 0) return;
    char line[160];
    std::snprintf(line, sizeof line, "global step %lld: loss = %.4f (%.3f sec/step)\n",
                  static_cast<long long>(r.step), r.total_loss, r.seconds);
    *out_ << line << std::flush;
  }

 private:
  std::int64_t n_;
  std::ostream* out_;
};

/// Saves a checkpoint every `every_steps` steps and/or `every_secs` seconds
/// (0 disables either) and when training ends.
class CheckpointHook : public Hook {
 public:
  CheckpointHook(io::CheckpointManager& mgr, std::int64_t every_steps, double every_secs = 0,
                 std::ostream* log = &std::cout)
      : mgr_(&mgr), steps_(every_steps), secs_(every_secs), log_(log) {}
  void begin(TrainerBase& t) override {
    last_time_ = detail::Clock::now();
    last_saved_ = t.global_step();
    steps_.reset(t.global_step());
  }
  void after_step(TrainerBase& t, const StepResult& r) override {
    const bool by_steps = steps_.due(r.step);
    const bool by_time = secs_ > 0 && detail::seconds_since(last_time_) >= secs_;
    if (by_steps || by_time) save(t);
  }
  void end(TrainerBase& t) override {
    if (t.global_step() != last_saved_ || !mgr_->latest()) save(t);
  }
  const std::string& last_path() const { return last_path_; }

 private:
  void save(TrainerBase& t) {
    const StateDict d = t.state_dict();  // (first: remote variables bring their global step)
    last_path_ = mgr_->save(t.global_step(), d);
    last_saved_ = t.global_step();
    last_time_ = detail::Clock::now();
    if (log_) *log_ << "Saved checkpoint " << last_path_ << "\n" << std::flush;
  }
  io::CheckpointManager* mgr_;
  detail::EveryNSteps steps_;
  double secs_;
  std::ostream* log_;
  std::int64_t last_saved_ = -1;
  detail::Clock::time_point last_time_;
  std::string last_path_;
};

/// TensorBoard scalars every N steps, histograms every hist_every steps. With
/// the trainer's save_summaries_secs > 0 (Slim's), each kind is written at a
/// due step only when that many seconds have passed since it was last
/// written (the first due step always writes): SummaryHook(w, 1) with
/// save_summaries_secs(600) writes about every 10 minutes, as Slim does.
/// The seconds are the writer's clock (wall time, as Slim's time.time()),
/// read once per step: that reading decides and stamps the step's events,
/// so their wall_time values are that many seconds apart too.
class SummaryHook : public Hook {
 public:
  SummaryHook(io::EventWriter& writer, std::int64_t every_n = 100, std::int64_t hist_every = 0)
      : w_(&writer), scalars_(every_n), histograms_(hist_every) {}
  /// Marks the (re)start in the event file: a SessionLog START at the first
  /// step this run will log (global step + 1), so TensorBoard drops what a
  /// run killed after its last checkpoint logged past it and keeps the
  /// summaries up to the restored step.
  void begin(TrainerBase& t) override {
    start_ = detail::Clock::now();
    secs_ = t.save_summaries_secs();
    last_scalars_.reset();
    last_histograms_.reset();
    w_->add_session_start(t.global_step() + 1);
    scalars_.reset(t.global_step());
    histograms_.reset(t.global_step());
  }
  void after_step(TrainerBase& t, const StepResult& r) override {
    ++steps_;
    examples_ += double(r.batch_size);
    loss_avg_ = have_avg_ ? 0.9 * loss_avg_ + 0.1 * r.loss : r.loss;
    total_avg_ = have_avg_ ? 0.9 * total_avg_ + 0.1 * r.total_loss : r.total_loss;
    have_avg_ = true;
    // EveryNSteps::due counts every step it sees: called on each step.
    const bool scalars_due = scalars_.due(r.step), histograms_due = histograms_.due(r.step);
    if (!scalars_due && !histograms_due) return;
    const double wall = w_->now();
    if (scalars_due && due(last_scalars_, wall)) {
      last_scalars_ = wall;
      const double dt = detail::seconds_since(start_);
      w_->add_scalar("loss", r.loss, r.step, wall);
      w_->add_scalar("total_loss", r.total_loss, r.step, wall);
      w_->add_scalar("loss/avg", loss_avg_, r.step, wall);
      w_->add_scalar("total_loss/avg", total_avg_, r.step, wall);
      w_->add_scalar("learning_rate", r.learning_rate, r.step, wall);
      if (dt > 0) {
        w_->add_scalar("global_step/sec", double(steps_) / dt, r.step, wall);
        w_->add_scalar("examples/sec", examples_ / dt, r.step, wall);
      }
      steps_ = 0;
      examples_ = 0;
      start_ = detail::Clock::now();
    }
    if (histograms_due && due(last_histograms_, wall)) {
      last_histograms_ = wall;
      t.visit_parameters([&](const ParamInfo& p, const float* v, const float* g) {
        w_->add_histogram(p.name, v, p.size, r.step, wall);
        if (g) w_->add_histogram(p.name + "/gradients", g, p.size, r.step, wall);
      });
    }
  }
  void end(TrainerBase&) override { w_->flush(); }

 private:
  /// No time limit, or none written yet, or save_summaries_secs passed
  /// since, by the writer's clock reading `wall`.
  bool due(const std::optional<double>& last, double wall) const {
    return secs_ <= 0 || !last || wall - *last >= secs_;
  }
  io::EventWriter* w_;
  detail::EveryNSteps scalars_, histograms_;
  double secs_ = 0;
  std::optional<double> last_scalars_, last_histograms_;  // the writer's clock at the last write
  detail::Clock::time_point start_;
  std::int64_t steps_ = 0;
  double examples_ = 0, loss_avg_ = 0, total_avg_ = 0;
  bool have_avg_ = false;
};

/// A one-line progress bar with ETA on stderr, only when stderr is a terminal.
class ProgressBarHook : public Hook {
 public:
  ProgressBarHook() : tty_(::isatty(2) != 0) {}
  void begin(TrainerBase& t) override {
    start_ = detail::Clock::now();
    first_ = t.global_step();
  }
  void after_step(TrainerBase& t, const StepResult& r) override {
    if (!tty_) return;
    if (!t.has_max_steps()) {  // until the input ends: no total, no ETA
      std::fprintf(stderr, "\r%lld steps, loss %.3f ", static_cast<long long>(r.step), r.total_loss);
      return;
    }
    const double done = double(r.step - first_), left = double(t.max_steps() - r.step);
    const double el = detail::seconds_since(start_);
    const double eta = done > 0 ? el / done * left : 0.0;
    const int width = 30;
    const int fill = t.max_steps() > 0 ? int(width * double(r.step) / double(t.max_steps())) : 0;
    std::fprintf(stderr, "\r[%-*s] %lld/%lld loss %.3f ETA %02d:%02d:%02d ", width,
                 std::string(std::size_t(std::max(0, std::min(width, fill))), '=').c_str(),
                 static_cast<long long>(r.step), static_cast<long long>(t.max_steps()), r.total_loss,
                 int(eta / 3600), int(eta / 60) % 60, int(eta) % 60);
  }
  void end(TrainerBase&) override {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_;
  detail::Clock::time_point start_;
  std::int64_t first_ = 0;
};

/// Calls f(trainer, result) after every step.
class LambdaHook : public Hook {
 public:
  explicit LambdaHook(std::function<void(TrainerBase&, const StepResult&)> f) : f_(std::move(f)) {}
  void after_step(TrainerBase& t, const StepResult& r) override { f_(t, r); }

 private:
  std::function<void(TrainerBase&, const StepResult&)> f_;
};

}  // namespace cifarnet::train
