// cifarnet/io/checkpoint_manager.hpp — checkpoints: safetensors files managed
// like TensorFlow's tf.train.Saver / CheckpointManager. (What goes into a
// StateDict: io/parameter_state.hpp; warm starts: io/warm_start.hpp.)
//
// A directory holds `model.ckpt-<step>.safetensors` files plus a text index
// `checkpoint` in TF's format (io/checkpoint_index.hpp). Both the
// checkpoint and the index are written atomically (temporary file, fsync,
// rename, fsync of the directory), the checkpoint first, so a crash at any
// instant leaves an index that names complete files. Old checkpoints beyond
// max_to_keep are deleted only after the new index is in place.
//
// Failures and crashes: a save that cannot be written (disk full, file-size
// limit) throws CheckpointSaveError (an IoError naming the file) and leaves
// the previous checkpoints and the index as they were, with no temporary
// file. Temporary files left by a process that was killed while saving are
// removed when a manager next opens the directory (only those whose process
// is gone). Every file carries CRC-32C checksums (io/safetensors.hpp);
// restore_latest() loads the newest one that verifies and reports the ones it
// skipped; set_aside() renames a corrupt one to "<file>.corrupt" so that it
// is kept for inspection but never loaded, overwritten or rotated away.
//
// Naming inside a checkpoint: docs/FORMATS.md and io/parameter_state.hpp.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/io/checkpoint_index.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/io/safetensors.hpp"

namespace cifarnet::io {

/// One checkpoint in a directory.
struct CheckpointInfo {
  std::int64_t step = 0;
  std::string path;  ///< directory + "/" + file name
};

/// What restore_latest() loaded, and why it skipped newer files.
struct RestoreResult {
  CheckpointInfo checkpoint;
  StateDict dict;
  std::vector<std::string> warnings;  ///< one per skipped (corrupt, missing) newer checkpoint
  /// The skipped ones whose content is wrong (DataError: checksum mismatch,
  /// truncation...), newest first; a resume passes them to set_aside().
  std::vector<CheckpointInfo> corrupt;
};

/// A checkpoint that could not be saved (disk full, file-size limit, I/O
/// error). The message is the IoError's (it names the file and the system's
/// reason) plus which checkpoint is still the latest; nothing was changed on
/// disk: the previous checkpoints and the index are intact.
class CheckpointSaveError : public IoError {
 public:
  CheckpointSaveError(const std::string& what, std::int64_t step, std::string path,
                      std::optional<CheckpointInfo> previous)
      : IoError(what), step_(step), path_(std::move(path)), previous_(std::move(previous)) {}
  /// The step that was not saved.
  std::int64_t step() const { return step_; }
  /// The checkpoint file that was not written.
  const std::string& path() const { return path_; }
  /// The latest checkpoint, still intact; nullopt when there was none.
  const std::optional<CheckpointInfo>& previous() const { return previous_; }

 private:
  std::int64_t step_;
  std::string path_;
  std::optional<CheckpointInfo> previous_;
};

/// Options of CheckpointManager.
struct CheckpointOptions {
  std::size_t max_to_keep = 5;        ///< 0 keeps every checkpoint
  std::string prefix = "model.ckpt";  ///< files are <prefix>-<step>.safetensors
  WriteOptions write;                 ///< checksums, fsync
  ReadOptions read;                   ///< checksum verification on restore
};

/// Saves numbered checkpoints into a directory, keeps the newest K, and
/// restores the newest readable one.
class CheckpointManager {
 public:
  /// Opens (creating it if needed) `directory`. The list of checkpoints comes
  /// from its `checkpoint` index; when the index is absent or unreadable, from
  /// the <prefix>-<step>.safetensors files present (see warnings()).
  explicit CheckpointManager(std::string directory, CheckpointOptions options = {})
      : dir_(std::move(directory)), opt_(std::move(options)) {
    if (opt_.prefix.empty() || opt_.prefix.find('/') != std::string::npos)
      throw ConfigError("CheckpointManager: prefix '" + opt_.prefix + "' must be a non-empty file name");
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec || !std::filesystem::is_directory(dir_))
      throw IoError(cifarnet::detail::concat("cannot create checkpoint directory '", dir_,
                                             "': ", ec ? ec.message() : "not a directory"));
    load_list();
    remove_stale_temporaries();
  }
  CheckpointManager(std::string directory, std::size_t max_to_keep)
      : CheckpointManager(std::move(directory), with_keep(max_to_keep)) {}

  const std::string& directory() const { return dir_; }
  std::string index_path() const { return dir_ + "/checkpoint"; }
  /// The file name a step is saved under.
  std::string file_name(std::int64_t step) const {
    return opt_.prefix + "-" + std::to_string(step) + ".safetensors";
  }
  /// Problems met while opening the directory (unreadable index...) and the
  /// temporary files of interrupted saves it removed.
  const std::vector<std::string>& warnings() const { return warnings_; }

  /// Writes <prefix>-<step>.safetensors and the index (both atomically), then
  /// deletes checkpoints beyond max_to_keep. Returns the checkpoint's path.
  /// On a write error (disk full, EFBIG under `ulimit -f`...) throws
  /// CheckpointSaveError, an IoError naming the file; the temporary file is
  /// removed and the previous checkpoints and index are untouched. (Under a
  /// file-size limit the process must ignore SIGXFSZ, whose default action
  /// kills it; the example programs do so in main.)
  std::string save(std::int64_t step, const StateDict& dict) {
    if (step < 0) throw ConfigError(cifarnet::detail::concat("CheckpointManager::save: step ", step, " < 0"));
    const std::string name = file_name(step);
    const std::string path = dir_ + "/" + name;
    const bool replaces =
        std::any_of(list_.begin(), list_.end(), [&](const CheckpointInfo& c) { return c.step == step; });
    auto failed = [&](const IoError& e) {
      std::optional<CheckpointInfo> prev;
      if (!list_.empty()) prev = list_.back();
      std::string what = std::string(e.what()).substr(std::strlen("cifarnet: "));
      what += cifarnet::detail::concat(
          "; checkpoint step ", step, " was not saved, the latest is still ",
          prev ? "'" + prev->path + "' (step " + std::to_string(prev->step) + ")" : std::string("none"));
      return CheckpointSaveError(what, step, path, prev);
    };
    try {
      write_safetensors(path, dict, opt_.write);
    } catch (const IoError& e) {
      throw failed(e);
    }

    std::vector<CheckpointInfo> next;
    for (const auto& c : list_)
      if (c.step != step) next.push_back(c);
    next.push_back({step, path});
    std::vector<CheckpointInfo> removed;
    if (opt_.max_to_keep > 0)
      while (next.size() > opt_.max_to_keep) {
        removed.push_back(next.front());
        next.erase(next.begin());
      }
    try {
      write_index(next);
    } catch (const IoError& e) {
      // The old index stays; drop the new file it does not name (unless it
      // replaced a listed checkpoint of the same step, which is complete).
      if (!replaces) std::filesystem::remove(path, ignore_);
      throw failed(e);
    }
    list_ = std::move(next);
    for (const auto& c : removed)
      if (c.path != path) std::filesystem::remove(c.path, ignore_);  // already gone is fine
    return path;
  }

  /// Managed checkpoints, oldest first (in the order they were saved; the latest last).
  const std::vector<CheckpointInfo>& checkpoints() const { return list_; }

  /// Moves a corrupt checkpoint out of the way: renames it to
  /// "<file>.corrupt" ("<file>.corrupt-2"... when that exists), drops it from
  /// the list and rewrites the index, so it is kept for inspection but never
  /// loaded, overwritten by a new save of its step, or deleted by max_to_keep.
  /// Returns the new path; IoError when the rename fails. (The writer of the
  /// directory calls this when resuming, e.g. Trainer::restore_latest.)
  std::string set_aside(const CheckpointInfo& c) {
    std::string to = c.path + ".corrupt";
    for (int i = 2; std::filesystem::exists(to, ignore_); ++i) to = c.path + ".corrupt-" + std::to_string(i);
    if (::rename(c.path.c_str(), to.c_str()) != 0) {
      const int err = errno;
      throw IoError(cifarnet::detail::concat("cannot set the corrupt checkpoint '", c.path, "' aside as '",
                                             to, "': ", detail::errno_text(err)));
    }
    list_.erase(
        std::remove_if(list_.begin(), list_.end(), [&](const CheckpointInfo& x) { return x.path == c.path; }),
        list_.end());
    if (list_.empty())
      std::filesystem::remove(index_path(), ignore_);
    else
      write_index(list_);
    return to;
  }

  /// Path of the newest checkpoint, if any.
  std::optional<std::string> latest() const {
    if (list_.empty()) return std::nullopt;
    return list_.back().path;
  }

  /// Loads the newest checkpoint that reads and verifies; a corrupt or
  /// missing newer one is skipped with a warning naming it and the fault
  /// (and listed in RestoreResult::corrupt when its content is wrong).
  /// Read-only: nothing on disk changes (an evaluator may call it while a
  /// trainer writes). nullopt when the directory has no checkpoint;
  /// DataError listing every failure when none is readable.
  std::optional<RestoreResult> restore_latest() const {
    if (list_.empty()) return std::nullopt;
    RestoreResult r;
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) {
      try {
        r.dict = read_safetensors(it->path, opt_.read);
        r.checkpoint = *it;
        return r;
      } catch (const Error& e) {
        r.warnings.push_back(cifarnet::detail::concat("skipping checkpoint '", it->path, "' (step ", it->step,
                                                      "): ", e.what()));
        if (dynamic_cast<const DataError*>(&e)) r.corrupt.push_back(*it);
      }
    }
    std::string all;
    for (const auto& w : r.warnings) all += "\n  " + w;
    throw DataError("no readable checkpoint in '" + dir_ + "':" + all);
  }

 private:
  static CheckpointOptions with_keep(std::size_t k) {
    CheckpointOptions o;
    o.max_to_keep = k;
    return o;
  }

  /// Step of "<prefix>-<digits>.safetensors", or nullopt.
  std::optional<std::int64_t> step_of(const std::string& name) const {
    const std::string head = opt_.prefix + "-", tail = ".safetensors";
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      return std::nullopt;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoll(digits);
  }

  void load_list() {
    const std::string idx_path = index_path();
    if (std::filesystem::exists(idx_path)) {
      try {
        const auto bytes = read_file(idx_path);
        const auto idx = parse_checkpoint_index(std::string(bytes.begin(), bytes.end()), idx_path);
        // Index order (oldest first), the latest last, as TF keeps it.
        std::vector<std::string> names;
        for (const auto& n : idx.all)
          if (n != idx.latest && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        if (!idx.latest.empty()) names.push_back(idx.latest);
        for (const auto& n : names) {
          const auto step = step_of(n);
          if (!step) {
            warnings_.push_back("index '" + idx_path + "' names '" + n + "', not a " + opt_.prefix +
                                "-<step>.safetensors file; ignored");
            continue;
          }
          list_.push_back({*step, dir_ + "/" + n});
        }
        return;
      } catch (const Error& e) {
        warnings_.push_back(std::string("ignoring the checkpoint index: ") + e.what() +
                            "; using the checkpoint files in the directory instead");
        list_.clear();
      }
    }
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ignore_)) {
      const auto name = entry.path().filename().string();
      if (const auto step = step_of(name)) list_.push_back({*step, dir_ + "/" + name});
    }
    std::sort(list_.begin(), list_.end(),
              [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  }

  /// Writes the index naming `list` (oldest first; the last is the latest), atomically.
  void write_index(const std::vector<CheckpointInfo>& list) const {
    CheckpointIndex idx;
    idx.latest = detail::base_of(list.back().path);
    for (const auto& c : list) idx.all.push_back(detail::base_of(c.path));
    const std::string text = format_checkpoint_index(idx);
    write_file_atomic(index_path(), text.data(), text.size(), opt_.write.durable);
  }

  /// Removes ".<prefix>-<step>.safetensors.tmp-<pid>-<n>" and
  /// ".checkpoint.tmp-<pid>-<n>" files (AtomicFileWriter's) whose process is
  /// gone: what a process killed in the middle of a save leaves behind.
  void remove_stale_temporaries() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ignore_)) {
      const auto name = entry.path().filename().string();
      const auto tmp = name.rfind(".tmp-");
      if (name.empty() || name[0] != '.' || tmp == std::string::npos || tmp < 2) continue;
      const std::string target = name.substr(1, tmp - 1), tail = name.substr(tmp + 5);
      if (target != "checkpoint" && !step_of(target)) continue;
      const auto dash = tail.find('-');
      if (dash == 0 || dash == std::string::npos || dash > 9 ||
          tail.find_first_not_of("0123456789-") != std::string::npos)
        continue;
      const pid_t pid = static_cast<pid_t>(std::stol(tail.substr(0, dash)));
      if (pid == ::getpid() || pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // maybe alive
      if (std::filesystem::remove(entry.path(), ignore_))
        warnings_.push_back(
            cifarnet::detail::concat("removed '", entry.path().string(),
                                     "', the temporary file of a save interrupted by the end of "
                                     "process ",
                                     pid));
    }
  }

  std::string dir_;
  CheckpointOptions opt_;
  std::vector<CheckpointInfo> list_;
  std::vector<std::string> warnings_;
  mutable std::error_code ignore_;
};

/// TF's tf.train.latest_checkpoint: the newest checkpoint path named by the
/// directory's index (or found in it), or nullopt.
inline std::optional<std::string> latest_checkpoint(const std::string& directory,
                                                    const std::string& prefix = "model.ckpt") {
  if (!std::filesystem::is_directory(directory)) return std::nullopt;
  CheckpointOptions o;
  o.prefix = prefix;
  return CheckpointManager(directory, o).latest();
}

}  // namespace cifarnet::io
