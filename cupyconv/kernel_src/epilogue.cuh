// Epilogue: the block's accumulators (+ bias) written to C through a row mapping.
//
// Row m of the GEMM lands at (m / L) * s_outer + (m % L) * s_inner, column n at n * s_n, so one
// epilogue writes a plain row-major matrix (L = M, s_inner = ldc, s_n = 1), a channels-last
// activation (L = M, s_inner = K, s_n = 1) and a channels-first one (L = pixels per image,
// s_outer = K * L, s_inner = 1, s_n = L).
#pragma once
#include "gemm_mainloop.cuh"

namespace cc {

struct OutMap {
  index_t L, s_outer, s_inner, s_n;
};

template <typename Cfg, typename T, typename A>
__device__ __forceinline__ void store_tile(const A (&acc)[Cfg::TM][Cfg::TN], T* C, const T* bias,
                                           int has_bias, int m0, int n0, int M, int N,
                                           const OutMap& map) {
  const int tx = threadIdx.x % (Cfg::BN / Cfg::TN), ty = threadIdx.x / (Cfg::BN / Cfg::TN);
  A b[Cfg::TN];
#pragma unroll
  for (int j = 0; j < Cfg::TN; ++j) {
    const int n = n0 + tile_offset<Cfg::BN, Cfg::TN>(tx, j);
    b[j] = (has_bias && n < N) ? load_as<A>(bias[n]) : A(0);
  }
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
    const int m = m0 + tile_offset<Cfg::BM, Cfg::TM>(ty, i);
    if (m >= M) continue;
    const index_t row = (m / map.L) * map.s_outer + (m % map.L) * map.s_inner;
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) {
      const int n = n0 + tile_offset<Cfg::BN, Cfg::TN>(tx, j);
      if (n < N) C[row + n * map.s_n] = store_as<T>(acc[i][j] + b[j]);
    }
  }
}

}  // namespace cc
