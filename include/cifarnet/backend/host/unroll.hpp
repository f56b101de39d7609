// cifarnet/backend/host/unroll.hpp — CIFARNET_UNROLL(n): `#pragma GCC
// unroll n` on the loop after it (GCC's and clang's), the own kernels'
// register tiles (backend/onednn/direct_conv_kernels.hpp, amx_wgrad.hpp),
// whose accumulators stay in registers only when those loops are unrolled.
//
// In an AddressSanitizer build it is nothing: the loops stay loops, the
// same operations in the same order (the same results), checked access by
// access as before. Such builds exist to check, not to run fast: clang 14
// with ASan at -O1 compiled tests/backend/test_direct_conv.cpp (both
// instruction sets' kernels) in 140 s with the tiles unrolled (the CI's
// sanitizer stage, scripts/test.sh, on a 2-core AMD EPYC), in 59 s without
// them while other tests ran on the same cores (2026-12-03).
#pragma once

#define CIFARNET_PRAGMA(x) _Pragma(#x)

#if defined(__SANITIZE_ADDRESS__)
#define CIFARNET_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CIFARNET_SANITIZED_BUILD 1
#endif
#endif

#if defined(CIFARNET_SANITIZED_BUILD)
#define CIFARNET_UNROLL(n)
#else
#define CIFARNET_UNROLL(n) CIFARNET_PRAGMA(GCC unroll n)
#endif
