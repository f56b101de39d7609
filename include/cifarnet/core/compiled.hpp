// cifarnet/core/compiled.hpp — the switch between the header-only default and
// the compiled mode (docs/ARCHITECTURE.md, "Compile time").
//
// Header-only (the default): every backend op is compiled in each translation
// unit that uses it, as before.
//
// Compiled mode (`CIFARNET_COMPILED_LIB` defined, which linking the CMake
// target `cifarnet::compiled` does): the backend ops that do not depend on a
// network's compile-time sizes (the oneDNN ops, the host ops behind them) are
// instantiated once, in the library `cifarnet_compiled`, and every other
// translation unit sees them as `extern template`: it parses them but neither
// instantiates nor optimizes them. An in-class member function is inline, and
// GCC instantiates an extern template's inline members anyway wherever it may
// inline them (at -O1 and above), so the ops' member functions carry
// CIFARNET_OUTLINE, which makes them noinline in compiled mode only: called,
// never compiled, in the user's translation units. The layer types stay
// templates, compiled where the network is.
#pragma once

#if defined(CIFARNET_COMPILED_LIB)
#define CIFARNET_OUTLINE __attribute__((noinline))
#else
#define CIFARNET_OUTLINE
#endif
