// cifarnet/core/fp_contract.hpp — keeping TensorFlow's rounding: TF's CPU
// kernels round every product and sum separately, while GCC in GNU mode with
// -march=native fuses a*b+c into one FMA (a result an ulp away). Functions
// that must match TF (optimizer updates, EMA, weight decay) are marked.
#pragma once

/// On a function: evaluate a*b+c as two rounded operations, never one FMA.
#if defined(__clang__)
#define CIFARNET_NO_FP_CONTRACT
#define CIFARNET_NO_FP_CONTRACT_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define CIFARNET_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#define CIFARNET_NO_FP_CONTRACT_BODY
#else
#define CIFARNET_NO_FP_CONTRACT
#define CIFARNET_NO_FP_CONTRACT_BODY
#endif
