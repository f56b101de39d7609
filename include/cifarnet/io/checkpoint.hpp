// cifarnet/io/checkpoint.hpp — checkpoints: safetensors files managed like
// TensorFlow's tf.train.Saver / CheckpointManager, and the glue between a
// StateDict and the parameter arena (strict restore, TF-Slim warm starts).
//
// A directory holds `model.ckpt-<step>.safetensors` files plus a text index
// `checkpoint` in TF's format:
//   model_checkpoint_path: "model.ckpt-300.safetensors"
//   all_model_checkpoint_paths: "model.ckpt-200.safetensors"
//   all_model_checkpoint_paths: "model.ckpt-300.safetensors"
// (paths relative to the directory, oldest first, the latest last). Both the
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
// Naming inside a checkpoint (docs/FORMATS.md): parameters by their
// hierarchical name, optimizer slots as "<param>/Momentum", "<param>/Adam",
// "<param>/Adam_1", EMA shadows as "<param>/ExponentialMovingAverage", the
// step as the I64 scalar "global_step"; RNG states ("rng/<name>") and the
// data pipeline position ("pipeline/<name>") in the metadata.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/name_pattern.hpp"
#include "cifarnet/core/params.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/io/file.hpp"
#include "cifarnet/io/safetensors.hpp"

namespace cifarnet::io {

// ------------------------------------------------------------------ state helpers

namespace detail {
/// "'path'" of a dict read from a file, else "state dict" (for messages).
inline std::string source_of(const StateDict& d) {
  return d.source.empty() ? "state dict" : "'" + d.source + "'";
}
}  // namespace detail

/// Stores the global step as the I64 scalar tensor "global_step" (TF's name).
inline void set_global_step(StateDict& dict, std::int64_t step) {
  dict.set("global_step", TensorData::scalar<std::int64_t>(step));
}
/// The "global_step" tensor (I64 or I32 scalar); nullopt when absent.
inline std::optional<std::int64_t> global_step(const StateDict& dict) {
  const TensorData* t = dict.find("global_step");
  if (!t) return std::nullopt;
  if (t->numel() != 1 || (t->dtype != Dtype::I64 && t->dtype != Dtype::I32))
    throw DataError(cifarnet::detail::concat(detail::source_of(dict), ": global_step is ",
                                             dtype_name(t->dtype), " of shape ",
                                             TensorData::shape_string(t->shape), ", expected an I64 scalar"));
  return t->dtype == Dtype::I64 ? t->item<std::int64_t>() : t->item<std::int32_t>();
}

/// Stores an Rng's state in the metadata as "rng/<name>" = four 16-digit hex words.
inline void set_rng_state(StateDict& dict, const std::string& name, const Rng::State& s) {
  std::string v;
  for (std::size_t i = 0; i < s.size(); ++i) v += (i ? " " : "") + detail::to_hex(s[i], 16);
  dict.metadata["rng/" + name] = v;
}
/// The Rng state saved by set_rng_state; nullopt when absent, DataError when malformed.
inline std::optional<Rng::State> rng_state(const StateDict& dict, const std::string& name) {
  auto it = dict.metadata.find("rng/" + name);
  if (it == dict.metadata.end()) return std::nullopt;
  const std::string& v = it->second;
  Rng::State s{};
  bool ok = v.size() == 4 * 16 + 3;
  for (std::size_t w = 0; ok && w < 4; ++w) {
    const auto x = detail::parse_hex(std::string_view(v).substr(w * 17, 16), 16);
    ok = x.has_value() && (w == 3 || v[w * 17 + 16] == ' ');
    s[w] = x.value_or(0);
  }
  if (!ok)
    throw DataError(cifarnet::detail::concat(detail::source_of(dict), ": metadata 'rng/", name, "' = '", v,
                                             "' is not four 16-digit lowercase hex words"));
  return s;
}

// ------------------------------------------------------------ checkpoint manager

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

namespace detail {
/// Parses `"..."` with \" and \\ escapes at s[pos]; nullopt when malformed.
inline std::optional<std::string> parse_quoted(const std::string& s, std::size_t pos) {
  if (pos >= s.size() || s[pos] != '"') return std::nullopt;
  std::string out;
  for (std::size_t i = pos + 1; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out += s[++i];
    } else if (s[i] == '"') {
      for (std::size_t j = i + 1; j < s.size(); ++j)
        if (s[j] != ' ' && s[j] != '\t' && s[j] != '\r') return std::nullopt;
      return out;
    } else {
      out += s[i];
    }
  }
  return std::nullopt;
}
inline std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace detail

/// The contents of a `checkpoint` index file.
struct CheckpointIndex {
  std::string latest;            ///< model_checkpoint_path
  std::vector<std::string> all;  ///< all_model_checkpoint_paths, oldest first
};

/// Parses a `checkpoint` index file; DataError naming the file and line on a malformed line.
inline CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& file) {
  CheckpointIndex idx;
  std::size_t line_no = 0, pos = 0, line_start = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    line_start = pos;
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto colon = line.find(':');
    const std::string key = colon == std::string::npos ? "" : line.substr(0, colon);
    std::size_t v = colon == std::string::npos ? 0 : colon + 1;
    while (v < line.size() && line[v] == ' ') ++v;
    const auto value = colon == std::string::npos ? std::nullopt : detail::parse_quoted(line, v);
    if (!value || (key != "model_checkpoint_path" && key != "all_model_checkpoint_paths"))
      throw DataError(
          cifarnet::detail::at_file(file, line_start,
                                    cifarnet::detail::concat("line ", line_no,
                                                             " is not 'model_checkpoint_path: \"...\"' or "
                                                             "'all_model_checkpoint_paths: \"...\"': ",
                                                             line)));
    if (key == "model_checkpoint_path")
      idx.latest = *value;
    else
      idx.all.push_back(*value);
  }
  return idx;
}

/// Formats a `checkpoint` index file.
inline std::string format_checkpoint_index(const CheckpointIndex& idx) {
  std::string s = "model_checkpoint_path: " + detail::quote(idx.latest) + "\n";
  for (const auto& p : idx.all) s += "all_model_checkpoint_paths: " + detail::quote(p) + "\n";
  return s;
}

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

// ------------------------------------------------------ parameters <-> StateDict

/// Adds every parameter (trainable and state) to `dict` under its
/// hierarchical name (prefixed by `prefix`), dtype of T, TF shape order.
template <class T>
void add_parameters(StateDict& dict, const Parameters<T>& params, const std::string& prefix = "") {
  if (!params.allocated()) throw Error("add_parameters: the parameter arena is not allocated yet");
  params.for_each([&](const ParamInfo& info, const T* value, const T*) {
    dict.set(prefix + info.name, TensorData::from<T>(info.shape, value));
  });
}

/// Options of load_parameters.
struct LoadOptions {
  /// true: every parameter must be in the dict (a resume). false: missing
  /// ones keep their values and are listed in the report.
  bool strict = true;
  std::string prefix;  ///< the tensors' names are prefix + parameter name
};

/// What a load or warm start did.
struct LoadReport {
  std::vector<std::pair<std::string, std::string>> loaded;  ///< (parameter, tensor) pairs
  std::vector<std::string> missing;                         ///< parameters left as they were
};

namespace detail {
inline std::string shape_str(const std::vector<std::size_t>& s) { return TensorData::shape_string(s); }

/// Copies tensor `t` into parameter `id`, checking shape and dtype.
template <class T>
void assign_tensor(Parameters<T>& params, std::size_t id, const TensorData& t, const std::string& tensor_name,
                   const StateDict& dict) {
  const ParamInfo& info = params.info(id);
  if (t.shape != info.shape)
    throw ShapeError(cifarnet::detail::concat("parameter '", info.name, "' has shape ", shape_str(info.shape),
                                              " but tensor '", tensor_name, "' in ", source_of(dict),
                                              " has shape ", shape_str(t.shape)));
  std::vector<T> v;
  try {
    v = t.to_floating<T>();
  } catch (const Error&) {
    throw DataError(cifarnet::detail::concat("parameter '", info.name, "': tensor '", tensor_name, "' in ",
                                             source_of(dict), " has dtype ", dtype_name(t.dtype),
                                             ", expected a floating type"));
  }
  std::copy(v.begin(), v.end(), params.value(id));
}
}  // namespace detail

/// Restores parameters from `dict` (a resume): each parameter from the
/// tensor named prefix + its name, shapes equal, floating dtypes converted
/// to T. Strict mode throws DataError naming every missing parameter.
/// Tensors that are not parameters (optimizer slots, global_step) are ignored.
template <class T>
LoadReport load_parameters(Parameters<T>& params, const StateDict& dict, const LoadOptions& opt = {}) {
  if (!params.allocated()) throw Error("load_parameters: the parameter arena is not allocated yet");
  LoadReport r;
  for (std::size_t id = 0; id < params.count(); ++id) {
    const ParamInfo& info = params.info(id);
    const std::string name = opt.prefix + info.name;
    if (!dict.find(name)) r.missing.push_back(info.name);
  }
  if (opt.strict && !r.missing.empty()) {
    std::string list;
    for (const auto& m : r.missing) {
      const ParamInfo& info = params.info(params.id(m));
      list += cifarnet::detail::concat(list.empty() ? "" : ", ", "'", opt.prefix + m, "' ",
                                       detail::shape_str(info.shape));
    }
    throw DataError(cifarnet::detail::concat(detail::source_of(dict), " is missing ", r.missing.size(),
                                             " parameter", r.missing.size() == 1 ? "" : "s", ": ", list));
  }
  for (std::size_t id = 0; id < params.count(); ++id) {
    const std::string name = opt.prefix + params.info(id).name;
    if (const TensorData* t = dict.find(name)) {
      detail::assign_tensor(params, id, *t, name, dict);
      r.loaded.emplace_back(params.info(id).name, name);
    }
  }
  return r;
}

/// Adds every state tensor of `obj` (an optimizer, a gradient transform, an
/// EMA: anything with visit_state(f) calling f(name, T* data, shape), see
/// optim/state.hpp) under prefix + its name, e.g. "conv1/weights/Momentum".
template <class S>
void add_state(StateDict& dict, S& obj, const std::string& prefix = "") {
  obj.visit_state([&](const std::string& name, auto* data, const std::vector<std::size_t>& shape) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
    dict.set(prefix + name, TensorData::from<T>(shape, data));
  });
}

/// Restores what add_state saved: every state tensor of `obj` must be in
/// `dict` with its shape (DataError / ShapeError naming it otherwise);
/// floating dtypes convert. Everything is checked before anything is written.
template <class S>
void load_state(S& obj, const StateDict& dict, const std::string& prefix = "") {
  for (int pass = 0; pass < 2; ++pass) {
    obj.visit_state([&](const std::string& name, auto* data, const std::vector<std::size_t>& shape) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
      const TensorData* t = dict.find(prefix + name);
      if (!t)
        throw DataError(cifarnet::detail::concat(detail::source_of(dict), " has no state tensor '",
                                                 prefix + name, "' ", detail::shape_str(shape)));
      if (t->shape != shape)
        throw ShapeError(cifarnet::detail::concat(
            "state '", name, "' has shape ", detail::shape_str(shape), " but tensor '", prefix + name,
            "' in ", detail::source_of(dict), " has shape ", detail::shape_str(t->shape)));
      std::vector<T> v;
      if constexpr (std::is_floating_point_v<T>) {
        if (t->dtype != Dtype::F16 && t->dtype != Dtype::BF16 && t->dtype != Dtype::F32 &&
            t->dtype != Dtype::F64)
          throw DataError(cifarnet::detail::concat("state '", name, "': tensor '", prefix + name, "' in ",
                                                   detail::source_of(dict), " has dtype ",
                                                   dtype_name(t->dtype), ", expected a floating type"));
        v = t->to_floating<T>();
      } else {
        if (t->dtype != dtype_of<T>())
          throw DataError(cifarnet::detail::concat(
              "state '", name, "': tensor '", prefix + name, "' in ", detail::source_of(dict), " has dtype ",
              dtype_name(t->dtype), ", expected ", dtype_name(dtype_of<T>())));
        v = t->values<T>();
      }
      if (pass == 1) std::copy(v.begin(), v.end(), data);
    });
  }
}

/// A name pattern: a glob ('*', '?', see core/names.hpp), an exact name or
/// an ECMAScript regular expression matched against the whole name
/// (core/name_pattern.hpp, shared with the optimizers' optim::Pattern).
using NamePattern = cifarnet::NamePattern;

/// Options of assign_from_checkpoint (TF-Slim's warm start).
struct WarmStartOptions {
  std::vector<NamePattern> include = {"*"};  ///< parameters to restore (model names)
  std::vector<NamePattern> exclude;          ///< minus these
  /// model-name prefix -> checkpoint-name prefix; the first matching entry
  /// renames ("resnet/" -> "old_net/" reads "old_net/conv1/weights" into
  /// "resnet/conv1/weights"). Unmatched names are looked up unchanged.
  std::vector<std::pair<std::string, std::string>> prefix_map;
  /// TF-Slim's ignore_missing_vars: selected parameters absent from the
  /// checkpoint are reported instead of being an error.
  bool ignore_missing = false;
};

/// TF-Slim's assign_from_checkpoint: restores the selected subset of
/// parameters from `dict`, with shape checks (ShapeError naming the parameter
/// and both shapes). A selection matching no parameter is a ConfigError; a
/// selected parameter missing from the checkpoint is a DataError unless
/// ignore_missing.
template <class T>
LoadReport assign_from_checkpoint(Parameters<T>& params, const StateDict& dict, const WarmStartOptions& opt) {
  if (!params.allocated()) throw Error("assign_from_checkpoint: the parameter arena is not allocated yet");
  std::vector<std::pair<std::size_t, std::string>> plan;
  LoadReport r;
  for (std::size_t id = 0; id < params.count(); ++id) {
    const std::string& name = params.info(id).name;
    bool in = false;
    for (const auto& p : opt.include) in = in || p.matches(name);
    for (const auto& p : opt.exclude) in = in && !p.matches(name);
    if (!in) continue;
    std::string ckpt_name = name;
    for (const auto& [from, to] : opt.prefix_map)
      if (name.compare(0, from.size(), from) == 0) {
        ckpt_name = to + name.substr(from.size());
        break;
      }
    if (!dict.find(ckpt_name)) {
      if (!opt.ignore_missing)
        throw DataError(cifarnet::detail::concat(
            "warm start: ", detail::source_of(dict), " has no tensor '", ckpt_name, "' for parameter '", name,
            "' ", detail::shape_str(params.info(id).shape), " (set ignore_missing to skip it)"));
      r.missing.push_back(name);
      continue;
    }
    plan.emplace_back(id, ckpt_name);
  }
  if (plan.empty() && r.missing.empty()) {
    std::string pats;
    for (const auto& p : opt.include) pats += (pats.empty() ? "" : ", ") + p.text();
    throw ConfigError("warm start: the include patterns [" + pats + "] select no parameter");
  }
  // Check every shape before changing anything, so a mismatch leaves the model as it was.
  for (const auto& [id, ckpt_name] : plan) {
    const TensorData& t = dict.at(ckpt_name);
    if (t.shape != params.info(id).shape)
      throw ShapeError(cifarnet::detail::concat("warm start: parameter '", params.info(id).name,
                                                "' has shape ", detail::shape_str(params.info(id).shape),
                                                " but tensor '", ckpt_name, "' in ", detail::source_of(dict),
                                                " has shape ", detail::shape_str(t.shape)));
  }
  for (const auto& [id, ckpt_name] : plan) {
    detail::assign_tensor(params, id, dict.at(ckpt_name), ckpt_name, dict);
    r.loaded.emplace_back(params.info(id).name, ckpt_name);
  }
  return r;
}

/// As above, reading the checkpoint file first.
template <class T>
LoadReport assign_from_checkpoint(Parameters<T>& params, const std::string& path, const WarmStartOptions& opt,
                                  const ReadOptions& read = {}) {
  return assign_from_checkpoint(params, read_safetensors(path, read), opt);
}

namespace detail {
template <class V, class = void>
struct has_shape : std::false_type {};
template <class V>
struct has_shape<V, std::void_t<decltype(std::declval<const V&>().shape())>> : std::true_type {};
}  // namespace detail

/// TF-Slim's assign_from_values: sets parameters from an in-memory map
/// name -> values. Values are either shaped containers (xt::xarray,
/// xt::xtensor: anything with shape() and row-major begin()/end()), whose
/// shape must equal the parameter's, or flat std::vector-like ranges whose
/// length must equal its element count. Unknown names are an Error naming
/// them; nothing is changed unless every entry checks out.
template <class T, class Map>
std::vector<std::string> assign_from_values(Parameters<T>& params, const Map& values) {
  if (!params.allocated()) throw Error("assign_from_values: the parameter arena is not allocated yet");
  std::vector<std::string> assigned;
  for (const auto& [name, v] : values) {
    const auto id = params.find(name);
    if (!id) throw Error("assign_from_values: no parameter named '" + std::string(name) + "'");
    const ParamInfo& info = params.info(*id);
    using V = std::decay_t<decltype(v)>;
    if constexpr (detail::has_shape<V>::value) {
      std::vector<std::size_t> shape(v.shape().begin(), v.shape().end());
      if (shape != info.shape)
        throw ShapeError(cifarnet::detail::concat("assign_from_values: parameter '", info.name,
                                                  "' has shape ", detail::shape_str(info.shape),
                                                  " but the value has shape ", detail::shape_str(shape)));
    } else {
      const auto n = static_cast<std::size_t>(std::distance(std::begin(v), std::end(v)));
      if (n != info.size)
        throw ShapeError(cifarnet::detail::concat(
            "assign_from_values: parameter '", info.name, "' has shape ", detail::shape_str(info.shape), " (",
            info.size, " elements) but the value has ", n, " elements"));
    }
  }
  for (const auto& [name, v] : values) {
    const std::size_t id = *params.find(name);
    T* dst = params.value(id);
    for (auto it = std::begin(v); it != std::end(v); ++it) *dst++ = static_cast<T>(*it);
    assigned.push_back(name);
  }
  return assigned;
}

}  // namespace cifarnet::io
