// tests/reliability/kill_harness.cpp — crash consistency under SIGKILL.
//
// Runs examples/train_demo (a deterministic training run with frequent
// checkpoints) and kills it with SIGKILL at random moments, restarting it
// each time until it completes; repeats with fresh job directories until
// --kills kills were made. Half of the kills (--write-share) wait until a
// checkpoint's temporary file appears and then strike within the write, which
// CIFARNET_TEST_SLOW_CHECKPOINT_MS stretches to --slow-ms milliseconds; the
// others strike at a uniformly random time after the start. It checks:
//   - after every kill, every checkpoint file in the directory verifies
//     (complete, checksums right: a torn file never carries a final name) and
//     the index names only existing files;
//   - every restart says where it resumed ("Restored <newest indexed
//     checkpoint> (global step N)"; with no index yet, the newest checkpoint
//     file; "Starting from step 0" when there is none), removes
//     the temporary files the killed process left, and never skips a
//     checkpoint (no "skipping checkpoint" warning: no torn file was read);
//   - every run that completes exits with status 0, and its final checkpoint
//     equals, byte for byte, that of an uninterrupted run.
// It prints the counts and exits 0 only when every check held.
//
//   kill_harness --bin build/examples/train_demo/train_demo --work /tmp/kills --kills 100
#include <CLI/CLI.hpp>

#include <cifarnet/core/rng.hpp>
#include <cifarnet/io/checkpoint.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using namespace cifarnet;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string bin, work;
  int kills = 20;
  std::uint64_t seed = 1;
  double slow_ms = 40, write_share = 0.5, timeout_s = 120;
  std::int64_t steps = 40, checkpoint_every = 5, batch = 8, keep = 3;
};

struct Counts {
  int kills = 0, during_write = 0, during_index_write = 0, after_rename = 0, before_rotation = 0;
  int no_checkpoint_yet = 0, restarts = 0, resumes_checked = 0, temporaries_removed = 0;
  int files_verified = 0, episodes = 0, write_mode = 0;
};

[[noreturn]] void fail(const std::string& what) {
  std::cerr << "kill_harness: FAILED: " << what << "\n";
  std::exit(1);
}

std::string slurp(const std::string& path) {
  const auto b = io::read_file(path);
  return std::string(b.begin(), b.end());
}

bool is_temporary(const std::string& name) { return name.find(".tmp-") != std::string::npos; }

/// One child process: train_demo with its output in `log`.
pid_t start(const Options& o, const std::string& job, const std::string& log, bool slow) {
  std::vector<std::string> args = {o.bin,
                                   "--job-dir",
                                   job,
                                   "--steps",
                                   std::to_string(o.steps),
                                   "--checkpoint-every",
                                   std::to_string(o.checkpoint_every),
                                   "--batch-size",
                                   std::to_string(o.batch),
                                   "--keep-checkpoints",
                                   std::to_string(o.keep),
                                   "--eval-examples",
                                   "0"};
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    if (slow)
      ::setenv("CIFARNET_TEST_SLOW_CHECKPOINT_MS", std::to_string(o.slow_ms).c_str(), 1);
    else
      ::unsetenv("CIFARNET_TEST_SLOW_CHECKPOINT_MS");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

/// A checkpoint's temporary file other than the `stale` ones (left by
/// earlier kills, removed by the restart once it opens the directory).
bool has_checkpoint_temporary(const std::string& dir, const std::vector<std::string>& stale) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto n = e.path().filename().string();
    if (is_temporary(n) && n.rfind(".model.ckpt-", 0) == 0 &&
        std::find(stale.begin(), stale.end(), e.path().string()) == stale.end())
      return true;
  }
  return false;
}

/// Waits for the child and kills it `delay_ms` after its start or, when
/// `wait_for_write`, `strike_ms` after the first checkpoint write that is
/// under way `delay_ms` after its start. Returns the wait status and whether
/// it was killed by us.
struct Outcome {
  int status = 0;
  bool killed = false;
};
Outcome run_child(pid_t pid, const Options& o, const std::string& job, bool wait_for_write, double delay_ms,
                  double strike_ms = 0, const std::vector<std::string>& stale = {}) {
  const auto t0 = Clock::now();
  const auto armed = t0 + std::chrono::microseconds(std::int64_t(delay_ms * 1000));
  std::optional<Clock::time_point> kill_at;
  if (!wait_for_write) kill_at = armed;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return {status, false};
    if (r < 0) fail("waitpid failed");
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - t0).count() > o.timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      fail("train_demo ran longer than " + std::to_string(o.timeout_s) + " s in " + job);
    }
    if (!kill_at && now >= armed && has_checkpoint_temporary(job, stale))
      kill_at = now + std::chrono::microseconds(std::int64_t(strike_ms * 1000));
    if (kill_at && now >= *kill_at) {
      ::kill(pid, SIGKILL);
      if (::waitpid(pid, &status, 0) != pid) fail("waitpid failed");
      // The child may have finished on its own between the poll above and
      // the kill (a kill aimed at its last moments): then it was not killed.
      return {status, WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
}

/// What a killed run left: every checkpoint file must verify; returns the
/// newest indexed step (nullopt: no index) and counts what was in flight.
/// `seen`: files already counted (a temporary or unindexed file stays until
/// a restart removes or resaves it).
std::optional<std::int64_t> inspect(const std::string& job, Counts& c, std::vector<std::string>& temporaries,
                                    std::set<std::string>& seen) {
  std::optional<std::int64_t> latest;
  std::vector<std::int64_t> indexed;
  const std::string index = job + "/checkpoint";
  auto step_of = [](const std::string& name) -> std::optional<std::int64_t> {
    const std::string head = "model.ckpt-", tail = ".safetensors";
    if (name.rfind(head, 0) != 0 || name.size() <= head.size() + tail.size() ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      return std::nullopt;
    return std::stoll(name.substr(head.size(), name.size() - head.size() - tail.size()));
  };
  if (fs::exists(index)) {
    const auto idx = io::parse_checkpoint_index(slurp(index), index);  // throws on a torn index
    for (const auto& n : idx.all) {
      if (!fs::exists(job + "/" + n)) fail("the index " + index + " names the missing file " + n);
      indexed.push_back(*step_of(n));
    }
    latest = step_of(idx.latest);
    if (!latest) fail("the index " + index + " names '" + idx.latest + "'");
  }
  bool in_write = false, in_index = false, after_rename = false, before_rotation = false;
  std::optional<std::int64_t> newest_file;  // the newest complete checkpoint file
  io::ReadOptions strict;
  strict.require_checksums = true;
  for (const auto& e : fs::directory_iterator(job)) {
    const auto name = e.path().filename().string();
    if (is_temporary(name)) {
      temporaries.push_back(e.path().string());
      if (seen.insert(name).second) (name.rfind(".checkpoint.", 0) == 0 ? in_index : in_write) = true;
      continue;
    }
    if (name.find(".corrupt") != std::string::npos) fail("a checkpoint was set aside as corrupt: " + name);
    const auto step = step_of(name);
    if (!step) continue;
    try {
      io::read_safetensors(e.path().string(), strict);
    } catch (const Error& err) {
      fail(std::string("torn or corrupt checkpoint after a kill: ") + err.what());
    }
    ++c.files_verified;
    if (!newest_file || *step > *newest_file) newest_file = step;
    if (std::find(indexed.begin(), indexed.end(), *step) == indexed.end() && seen.insert(name).second)
      (latest && *step < *latest ? before_rotation : after_rename) = true;
  }
  c.during_write += in_write;
  c.during_index_write += in_index;
  c.after_rename += after_rename;
  c.before_rotation += before_rotation;
  // Without an index (a kill between the first checkpoint's rename and the
  // first index write), CheckpointManager lists the checkpoint files present
  // and the restart restores the newest.
  if (!fs::exists(index)) latest = newest_file;
  c.no_checkpoint_yet += !latest;
  return latest;
}

/// The restarted run's log must say where it resumed, that it removed the
/// temporaries, and that it skipped nothing. False when it was killed before
/// it got that far.
bool check_resume(const std::string& log, const std::string& job, std::optional<std::int64_t> expect,
                  const std::vector<std::string>& temporaries, Counts& c) {
  const std::string text = slurp(log);
  if (text.find("skipping checkpoint") != std::string::npos || text.find("corrupt") != std::string::npos)
    fail("a restart skipped a checkpoint (" + log + "):\n" + text);
  const std::string want = expect ? "Restored " + job + "/model.ckpt-" + std::to_string(*expect) +
                                        ".safetensors (global step " + std::to_string(*expect) + ")\n"
                                  : "Starting from step 0 (no checkpoint in " + job + ")\n";
  if (text.find(want) == std::string::npos) {
    if (text.find("Restored ") != std::string::npos || text.find("Starting from step") != std::string::npos)
      fail("expected '" + want.substr(0, want.size() - 1) + "' in " + log + ":\n" + text);
    return false;  // killed before it restored
  }
  for (const auto& t : temporaries) {
    if (text.find("removed '" + t + "'") == std::string::npos)
      fail("the restart did not report removing " + t + " (" + log + ")");
    if (fs::exists(t)) fail("the temporary file " + t + " is still there after a restart");
    ++c.temporaries_removed;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Kills train_demo with SIGKILL at random moments and checks every restart"};
  app.add_option("--bin", o.bin, "The train_demo executable.")->required();
  app.add_option("--work", o.work, "Scratch directory (emptied first).")->required();
  app.add_option("--kills", o.kills, "Kills to make.")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the kill times.")->capture_default_str();
  app.add_option("--slow-ms", o.slow_ms, "Each checkpoint write is stretched to this long.")
      ->capture_default_str();
  app.add_option("--write-share", o.write_share, "Share of kills aimed at a checkpoint write.")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Steps of each training run.")->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps.")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch, "Batch size.")->capture_default_str();
  app.add_option("--keep", o.keep, "Checkpoints kept.")->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "Seconds one run may take.")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);

  fs::remove_all(o.work);
  fs::create_directories(o.work);
  o.work = fs::absolute(o.work).string();
  const auto t_start = Clock::now();

  // The uninterrupted run.
  const std::string ref = o.work + "/uninterrupted";
  const auto t_ref = Clock::now();
  const Outcome r = run_child(start(o, ref, o.work + "/uninterrupted.log", false), o, ref, false, 1e12);
  const double ref_s = std::chrono::duration<double>(Clock::now() - t_ref).count();
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    fail("the uninterrupted run failed:\n" + slurp(o.work + "/uninterrupted.log"));
  const std::string final_name = "/model.ckpt-" + std::to_string(o.steps) + ".safetensors";
  const auto reference = io::read_file(ref + final_name);

  Counts c;
  Rng rng(o.seed);
  int attempt = 0;
  while (c.kills < o.kills) {
    const std::string job = o.work + "/run" + std::to_string(c.episodes);
    fs::create_directories(job);
    std::optional<std::int64_t> expect;
    std::vector<std::string> temporaries;
    std::set<std::string> seen;
    for (bool done = false, first = true; !done; first = false) {
      if (++attempt > 20 * o.kills + 100) fail("too many attempts without completing");
      const std::string log = o.work + "/attempt" + std::to_string(attempt) + ".log";
      const bool at_write = c.kills < o.kills && rng.uniform() < o.write_share;
      // Random moments span the uninterrupted run's duration; write-aimed
      // kills strike within the next stretched write after such a moment.
      const double delay = c.kills >= o.kills ? 1e12 : rng.uniform(0, 1e3 * ref_s);
      const double strike = rng.uniform(0, 0.9 * o.slow_ms);
      const Outcome out = run_child(start(o, job, log, true), o, job, at_write, delay, strike, temporaries);
      const bool said = check_resume(log, job, expect, temporaries, c);
      c.resumes_checked += said && !first;
      if (!out.killed) {
        if (!WIFEXITED(out.status) || WEXITSTATUS(out.status) != 0)
          fail("a run exited with status " + std::to_string(out.status) + " (" + log + "):\n" + slurp(log));
        if (!said) fail("a completed run did not say where it started (" + log + ")");
        done = true;
        continue;
      }
      if (!WIFSIGNALED(out.status) || WTERMSIG(out.status) != SIGKILL)
        fail("a run ended with status " + std::to_string(out.status) + " instead of our SIGKILL (" + log +
             ")");
      ++c.kills;
      c.write_mode += at_write;
      temporaries.clear();
      expect = inspect(job, c, temporaries, seen);
      ++c.restarts;
    }
    // The completed run: its final checkpoint equals the uninterrupted one's.
    if (io::read_file(job + final_name) != reference)
      fail(job + final_name + " differs from the uninterrupted run's " + ref + final_name);
    for (const auto& e : fs::directory_iterator(job))
      if (is_temporary(e.path().filename().string())) fail("a temporary file remains: " + e.path().string());
    ++c.episodes;
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::printf(
      "kill_harness: %d kills (%d aimed at a checkpoint write); the killed process left: a checkpoint's "
      "temporary file %d times, the index's temporary file %d times, a new checkpoint not yet indexed %d "
      "times, an old one not yet rotated away %d times, no checkpoint yet %d times\n",
      c.kills, c.write_mode, c.during_write, c.during_index_write, c.after_rename, c.before_rotation,
      c.no_checkpoint_yet);
  std::printf(
      "kill_harness: %d restarts; %d of them got far enough to check and resumed from the newest indexed "
      "checkpoint (or step 0) with no checkpoint skipped; %d temporary files removed by restarts; %d "
      "checkpoint files verified after kills, 0 torn\n",
      c.restarts, c.resumes_checked, c.temporaries_removed, c.files_verified);
  std::printf(
      "kill_harness: %d runs completed, every final checkpoint equal byte for byte to the uninterrupted "
      "run's (%s); %.1f s\n",
      c.episodes, (ref + final_name).c_str(), total_s);
  return 0;
}
