// src/onednn_ops.cpp — the compiled mode's library (CMake target
// cifarnet_compiled, alias cifarnet::compiled): the oneDNN backend's ops
// instantiated once (backend/onednn/compiled_ops.hpp), so that a program
// linking cifarnet::compiled compiles only its own network's code
// (core/compiled.hpp, docs/ARCHITECTURE.md "Compile time").
#define CIFARNET_BUILDING_COMPILED_LIB 1
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/backend/onednn/compiled_ops.hpp>

namespace cifarnet {
#define CIFARNET_INSTANTIATE(kind, ...) template kind __VA_ARGS__;
CIFARNET_ONEDNN_COMPILED_OPS(CIFARNET_INSTANTIATE)
#undef CIFARNET_INSTANTIATE
#define CIFARNET_INSTANTIATE_MEMBER(...) template __VA_ARGS__;
CIFARNET_ONEDNN_COMPILED_MEMBERS(CIFARNET_INSTANTIATE_MEMBER)
#undef CIFARNET_INSTANTIATE_MEMBER
}  // namespace cifarnet
