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
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/name_pattern.hpp"
#include "cifarnet/core/params.hpp"

namespace cifarnet::optim {

/// A parameter-name pattern: exact, glob or regex, always matched against
/// the whole name (core/name_pattern.hpp, shared with io's warm starts).
using Pattern = NamePattern;

/// True when `p` matches the name of at least one trainable parameter
/// (a pattern that matches none is a typo the callers report).
template <class T>
bool matches_trainable(const Pattern& p, const Parameters<T>& params) {
  for (std::size_t i = 0; i < params.count(); ++i)
    if (params.info(i).trainable && p.matches(params.info(i).name)) return true;
  return false;
}

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
    for (const auto& p : patterns_)
      if (!matches_trainable(p, params))
        throw ConfigError("variables_to_train: pattern '" + p.str() + "' matches no trainable parameter");
    return ids;
  }

 private:
  std::vector<Pattern> patterns_;
  bool all_ = true;
};

/// TF-Slim's name: train only the parameters matching `patterns`.
inline Selection variables_to_train(std::vector<Pattern> patterns) { return Selection(std::move(patterns)); }

}  // namespace cifarnet::optim
