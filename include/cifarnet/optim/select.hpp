// cifarnet/optim/select.hpp — choosing parameters by name: patterns and
// `variables_to_train`.
//
// A Pattern matches a full parameter name: exactly, by glob ('*' any run of
// characters including '/', '?' one character), or by ECMAScript regex (full
// match). A plain string converts to a glob, so a name without '*' or '?' is
// an exact match. A Selection is the TF-Slim `variables_to_train` list: the
// trainable parameters an optimizer, transform or EMA works on; resolving a
// selection whose pattern matches no trainable parameter is a ConfigError
// (a typo would otherwise silently freeze the whole model).
#pragma once

#include <cstddef>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/params.hpp"

namespace cifarnet::optim {

/// A parameter-name pattern: exact, glob or regex, always matched against
/// the whole name.
class Pattern {
 public:
  enum class Kind { Exact, Glob, Regex };

  /// A glob ("stage1/*/weights"); without '*' or '?' it is an exact name.
  Pattern(std::string glob) : Pattern(Kind::Glob, std::move(glob)) {}  // NOLINT(implicit)
  Pattern(const char* glob) : Pattern(std::string(glob)) {}            // NOLINT(implicit)

  static Pattern exact(std::string name) { return Pattern(Kind::Exact, std::move(name)); }
  static Pattern glob(std::string glob) { return Pattern(Kind::Glob, std::move(glob)); }
  /// ECMAScript syntax, whole-name match; a bad expression is a ConfigError.
  static Pattern regex(std::string expr) { return Pattern(Kind::Regex, std::move(expr)); }

  Kind kind() const { return kind_; }
  const std::string& str() const { return text_; }

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

  /// Iterative wildcard match with backtracking to the last '*'; linear in
  /// practice, never exponential.
  static bool glob_match(const std::string& pat, const std::string& s) {
    std::size_t p = 0, i = 0, star = std::string::npos, mark = 0;
    while (i < s.size()) {
      if (p < pat.size() && (pat[p] == '?' || pat[p] == s[i])) {
        ++p, ++i;
      } else if (p < pat.size() && pat[p] == '*') {
        star = p++, mark = i;
      } else if (star != std::string::npos) {
        p = star + 1, i = ++mark;
      } else {
        return false;
      }
    }
    while (p < pat.size() && pat[p] == '*') ++p;
    return p == pat.size();
  }

 private:
  Pattern(Kind kind, std::string text) : kind_(kind), text_(std::move(text)) {
    if (kind_ == Kind::Glob && text_.find_first_of("*?") == std::string::npos) kind_ = Kind::Exact;
    if (kind_ == Kind::Regex) {
      try {
        re_ = std::regex(text_, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw ConfigError("bad regex pattern '" + text_ + "': " + e.what());
      }
    }
  }

  Kind kind_;
  std::string text_;
  std::regex re_;
};

/// Which trainable parameters are trained (TF-Slim `variables_to_train`):
/// all of them (the default), or those matching any of the patterns.
class Selection {
 public:
  /// Every trainable parameter.
  Selection() = default;
  static Selection all() { return Selection(); }
  explicit Selection(std::vector<Pattern> patterns) : patterns_(std::move(patterns)), all_(false) {
    if (patterns_.empty())
      throw ConfigError("variables_to_train: empty pattern list (use Selection::all() to train everything)");
  }

  bool is_all() const { return all_; }
  const std::vector<Pattern>& patterns() const { return patterns_; }

  bool matches(const std::string& name) const {
    if (all_) return true;
    for (const auto& p : patterns_)
      if (p.matches(name)) return true;
    return false;
  }

  /// Ids of the selected trainable parameters, in registration order. Throws
  /// ConfigError when a pattern matches no trainable parameter.
  template <class T>
  std::vector<std::size_t> resolve(const Parameters<T>& params) const {
    std::vector<std::size_t> ids;
    for (std::size_t i = 0; i < params.count(); ++i) {
      const auto& info = params.info(i);
      if (info.trainable && matches(info.name)) ids.push_back(i);
    }
    for (const auto& p : patterns_) {
      bool hit = false;
      for (std::size_t i = 0; i < params.count() && !hit; ++i)
        hit = params.info(i).trainable && p.matches(params.info(i).name);
      if (!hit)
        throw ConfigError("variables_to_train: pattern '" + p.str() + "' matches no trainable parameter");
    }
    return ids;
  }

 private:
  std::vector<Pattern> patterns_;
  bool all_ = true;
};

/// TF-Slim's name: train only the parameters matching `patterns`.
inline Selection variables_to_train(std::vector<Pattern> patterns) { return Selection(std::move(patterns)); }

}  // namespace cifarnet::optim
