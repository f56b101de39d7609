// cifarnet/core/names.hpp — glob matching of hierarchical parameter names.
//
// Patterns use '*' (any run of characters, including '/') and '?' (one
// character); everything else matches itself. Used to select parameters by
// name for initializers, weight decay, warm starts and gradient multipliers.
#pragma once

#include <string>
#include <vector>

namespace cifarnet {

/// True when `name` matches the glob `pattern` entirely.
inline bool glob_match(const std::string& pattern, const std::string& name) {
  std::size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace cifarnet
