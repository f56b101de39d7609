// cifarnet/core/name_pattern.hpp — NamePattern: a parameter-name pattern,
// exact, glob (core/names.hpp's glob_match) or ECMAScript regex, always
// matched against the whole name. Optimizers (optim::Pattern, choosing what
// to train) and warm starts (io::NamePattern, choosing what to restore) both
// use it. Kept apart from names.hpp so that only they pay for <regex>.
//
// A plain string converts to a glob, so a name without '*' or '?' is an
// exact match; a bad regex is a ConfigError naming it.
#pragma once

#include <regex>
#include <string>
#include <utility>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/names.hpp"

namespace cifarnet {

/// A parameter-name pattern: exact, glob or regex, matched against the
/// whole name.
class NamePattern {
 public:
  enum class Kind { Exact, Glob, Regex };

  /// A glob ("stage1/*/weights"); without '*' or '?' it is an exact name.
  NamePattern(std::string glob) : NamePattern(Kind::Glob, std::move(glob)) {}  // NOLINT(implicit)
  NamePattern(const char* glob) : NamePattern(std::string(glob)) {}            // NOLINT(implicit)

  /// `name` itself ('*' and '?' taken literally).
  static NamePattern exact(std::string name) { return NamePattern(Kind::Exact, std::move(name)); }
  static NamePattern glob(std::string glob) { return NamePattern(Kind::Glob, std::move(glob)); }
  /// ECMAScript syntax, whole-name match; a bad expression is a ConfigError.
  static NamePattern regex(std::string expr) { return NamePattern(Kind::Regex, std::move(expr)); }

  Kind kind() const { return kind_; }
  bool is_regex() const { return kind_ == Kind::Regex; }
  /// The pattern as given.
  const std::string& str() const { return text_; }
  const std::string& text() const { return text_; }

  bool matches(const std::string& name) const {
    switch (kind_) {
      case Kind::Exact:
        return name == text_;
      case Kind::Glob:
        return glob_match(text_, name);
      case Kind::Regex:
        return std::regex_match(name, re_);
    }
    return false;
  }

 private:
  NamePattern(Kind kind, std::string text) : kind_(kind), text_(std::move(text)) {
    if (kind_ == Kind::Glob && text_.find_first_of("*?") == std::string::npos) kind_ = Kind::Exact;
    if (kind_ == Kind::Regex) {
      try {
        re_ = std::regex(text_, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw ConfigError("invalid name regex '" + text_ + "': " + e.what());
      }
    }
  }

  Kind kind_;
  std::string text_;
  std::regex re_;
};

}  // namespace cifarnet
