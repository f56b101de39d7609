// cifarnet/io/checkpoint_index.hpp — the text index `checkpoint` of a
// checkpoint directory, in TensorFlow's format:
//   model_checkpoint_path: "model.ckpt-300.safetensors"
//   all_model_checkpoint_paths: "model.ckpt-200.safetensors"
//   all_model_checkpoint_paths: "model.ckpt-300.safetensors"
// (paths relative to the directory, oldest first, the latest last).
// Parsing and formatting only; io/checkpoint_manager.hpp writes it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet::io {

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

}  // namespace cifarnet::io
