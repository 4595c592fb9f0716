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

// Writes the block's tile.  A thread's accumulators come in 4x4 chunks of consecutive rows and
// columns; where 4 consecutive columns (s_n == 1, channels-last and row-major C) or 4 consecutive
// rows (s_inner == 1 and L a multiple of 4, channels-first) are adjacent in memory, each goes out
// as one vector store (`vec`, checked on the host together with alignment), which keeps a warp's
// stores on few cache lines.  Elsewhere elements are stored one by one.
template <typename Cfg, typename T, typename A>
__device__ __forceinline__ void store_tile(const A (&acc)[Cfg::TM][Cfg::TN], T* C, const T* bias,
                                           int has_bias, int m0, int n0, int M, int N,
                                           const OutMap& map, bool vec) {
  constexpr int TM = Cfg::TM, TN = Cfg::TN;
  const int tx = threadIdx.x % (Cfg::BN / TN), ty = threadIdx.x / (Cfg::BN / TN);
  A b[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = n0 + tile_offset<Cfg::BN, TN>(tx, j);
    b[j] = (has_bias && n < N) ? load_as<A>(bias[n]) : A(0);
  }
  const bool along_n = vec && map.s_n == 1;
  const bool along_m = vec && !along_n;
#pragma unroll
  for (int ic = 0; ic < TM / 4; ++ic) {
#pragma unroll
    for (int jc = 0; jc < TN / 4; ++jc) {
      const int mb = m0 + tile_offset<Cfg::BM, TM>(ty, 4 * ic);
      const int nb = n0 + tile_offset<Cfg::BN, TN>(tx, 4 * jc);
      if (along_n && nb + 3 < N) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int m = mb + i;
          if (m >= M) break;
          A v[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = acc[4 * ic + i][4 * jc + j] + b[4 * jc + j];
          stg4(C + (m / map.L) * map.s_outer + (m % map.L) * map.s_inner + nb, v);
        }
      } else if (along_m && mb + 3 < M) {
        // rows mb..mb+3 lie in one image (L % 4 == 0 and mb % 4 == 0)
        const index_t row = (mb / map.L) * map.s_outer + (mb % map.L);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = nb + j;
          if (n >= N) break;
          A v[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) v[i] = acc[4 * ic + i][4 * jc + j] + b[4 * jc + j];
          stg4(C + row + n * map.s_n, v);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int m = mb + i;
          if (m >= M) break;
          const index_t row = (m / map.L) * map.s_outer + (m % map.L) * map.s_inner;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int n = nb + j;
            if (n < N) C[row + n * map.s_n] = store_as<T>(acc[4 * ic + i][4 * jc + j] + b[4 * jc + j]);
          }
        }
      }
    }
  }
}

}  // namespace cc
