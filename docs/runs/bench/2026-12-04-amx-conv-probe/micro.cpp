#include <immintrin.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <x86intrin.h>
#include "cifarnet/backend/onednn/amx_wgrad.hpp"
namespace T = cifarnet::backend::onednn::amx::detail;
using u16 = std::uint16_t;
// Cycles per TDP of a 2x2 block loop over `iters` (tap, k) steps with A rows
// at stride `as` bytes and tap offsets toff[t] (positions of `kc` channels).
int main(int argc, char** argv) {
  cifarnet::backend::onednn::amx::amx_available();
  const int mode = std::atoi(argv[4]);
  const int pw = std::atoi(argv[1]), kc = std::atoi(argv[2]), kb = kc / 32, blocks = std::atoi(argv[3]);
  std::vector<u16> Av(std::size_t(64 * 1024) * 64 + 64, 0x3f80), Bv(9 * 2 * 4 * 512 + 64, 0x3f80);
  struct AlignedView {
    u16* p;
    u16* data() { return p; }
  };
  // argv[6]: bytes added to both operands' 64-byte aligned starts (0 when absent).
  const std::uintptr_t skew = argc > 6 ? std::uintptr_t(std::atoi(argv[6])) : 0;
  AlignedView A{reinterpret_cast<u16*>(
      ((reinterpret_cast<std::uintptr_t>(Av.data()) + 63) & ~std::uintptr_t(63)) + skew)};
  AlignedView B{reinterpret_cast<u16*>(
      ((reinterpret_cast<std::uintptr_t>(Bv.data()) + 63) & ~std::uintptr_t(63)) + skew)};
  T::tile_config();
  alignas(64) float buf[256];
  for (int rep = 0; rep < 3; ++rep) {
    unsigned long long t0 = __rdtsc();
    long tdps = 0;
    for (int bl = 0; bl < blocks; ++bl) {
      const int mt0 = (bl * 2) % std::atoi(argv[5]);
      T::tile_zero<0>();
      T::tile_zero<1>();
      T::tile_zero<2>();
      T::tile_zero<3>();
      for (int t = 0; t < 9; ++t) {
        const int toff = (t / 3) * pw + t % 3;
        for (int k = 0; k < kb; ++k) {
          const u16* b = B.data() + (std::size_t(t) * kb + k) * 2 * 512;
          const u16* a0 = A.data() + (std::size_t(mt0) * 16 + toff) * kc + k * 32;
          const u16* a1 = A.data() + (std::size_t(mt0 + 1) * 16 + toff) * kc + k * 32;
          if (mode == 0) {
            T::tile_load<6>(b, 64);
            T::tile_load<7>(b + 512, 64);
            T::tile_load<4>(a0, kc * 2);
            T::tile_dp<0, 4, 6>();
            T::tile_dp<1, 4, 7>();
            T::tile_load<5>(a1, kc * 2);
            T::tile_dp<2, 5, 6>();
            T::tile_dp<3, 5, 7>();
            tdps += 4;
          } else if (mode == 1) {
            T::tile_load<4>(a0, kc * 2);
            T::tile_load<6>(b, 64);
            T::tile_dp<0, 4, 6>();
            T::tile_load<7>(b + 512, 64);
            T::tile_dp<1, 4, 7>();
            T::tile_load<5>(a1, kc * 2);
            T::tile_dp<2, 5, 6>();
            T::tile_dp<3, 5, 7>();
            tdps += 4;
          } else if (mode == 2) {  // 2x1, double-buffered: C 0,1; set0 A 2,3 B 4; set1 A 5,6 B 7
            if ((t * kb + k) % 2 == 0) {
              T::tile_load<4>(b, 64);
              T::tile_load<2>(a0, kc * 2);
              T::tile_dp<0, 2, 4>();
              T::tile_load<3>(a1, kc * 2);
              T::tile_dp<1, 3, 4>();
            } else {
              T::tile_load<7>(b, 64);
              T::tile_load<5>(a0, kc * 2);
              T::tile_dp<0, 5, 7>();
              T::tile_load<6>(a1, kc * 2);
              T::tile_dp<1, 6, 7>();
            }
            tdps += 2;
          } else if (mode == 4) {  // loads only
            T::tile_load<6>(b, 64);
            T::tile_load<7>(b + 512, 64);
            T::tile_load<4>(a0, kc * 2);
            T::tile_load<5>(a1, kc * 2);
            tdps += 4;
          } else if (mode == 5) {  // B stationary: A loads only, 2 per 4 TDPs
            T::tile_load<4>(a0, kc * 2);
            T::tile_dp<0, 4, 6>();
            T::tile_dp<1, 4, 7>();
            T::tile_load<5>(a1, kc * 2);
            T::tile_dp<2, 5, 6>();
            T::tile_dp<3, 5, 7>();
            tdps += 4;
          } else {  // no loads: TDP throughput bound
            T::tile_dp<0, 4, 6>();
            T::tile_dp<1, 4, 7>();
            T::tile_dp<2, 5, 6>();
            T::tile_dp<3, 5, 7>();
            tdps += 4;
          }
        }
      }
      T::tile_store<0>(buf, 64);
      T::tile_store<1>(buf, 64);
      T::tile_store<2>(buf, 64);
      T::tile_store<3>(buf, 64);
    }
    unsigned long long t1 = __rdtsc();
    std::printf("pw %d kc %d skew %d: %.1f cycles per TDP\n", pw, kc, int(skew), double(t1 - t0) / tdps);
  }
}
