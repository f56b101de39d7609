// What docs/DATA.md's code fragments take as given: the data headers, the
// namespaces and the CIFAR-10 directory (snippets mode of
// extract_code.cmake; compiled, not run).
#pragma once

#include <cifarnet/data/data.hpp>

#include <memory>
#include <string>

using namespace cifarnet;
using namespace cifarnet::data;

extern std::string dir;  // where the CIFAR-10 files are
