// Epilogue: the block's accumulators (+ bias, + residual z, activation: the fused inference
// epilogue, all in the accumulator type) written to C through a row mapping.
//
// Row m of the GEMM lands at (m / L) * s_outer + (m % L) * s_inner, column n at n * s_n, so one
// epilogue writes a plain row-major matrix (L = M, s_inner = ldc, s_n = 1), a channels-last
// activation (L = M, s_inner = K, s_n = 1) and a channels-first one (L = pixels per image,
// s_outer = K * L, s_inner = 1, s_n = L).  z, where given, has C's layout: it is read at each
// element's offset from C, through its own base pointer (`Epilogue`, activation.cuh).
#pragma once
#include "gemm_mainloop.cuh"
#include "activation.cuh"

namespace cc {

struct OutMap {
  index_t L, s_outer, s_inner, s_n;
};

// Writes the block's tile.  A thread's accumulators come in 4x4 chunks of consecutive rows and
// columns; where 4 consecutive columns (s_n == 1, channels-last and row-major C) or 4 consecutive
// rows (s_inner == 1 and L a multiple of 4, channels-first) are adjacent in memory, each goes out
// as one vector store (`vec`, checked on the host together with alignment), which keeps a warp's
// stores on few cache lines.  Elsewhere elements are stored one by one.
//
// The values are finished before the stores, in one pass per step over the whole tile: + bias,
// + z (`ep`: read element by element, since the host checks the alignment of C only and z is read
// once), the activation.  One instance of the activation per accumulator, not one per store path,
// keeps the kernel's code size (and compile time) down; without z and activation the stored values
// are acc + bias, bit for bit.
template <typename Cfg, typename T, typename A>
__device__ __forceinline__ void store_tile(const A (&acc)[Cfg::TM][Cfg::TN], T* C, const T* bias,
                                           int has_bias, const Epilogue<T>& ep, int m0, int n0,
                                           int M, int N, const OutMap& map, bool vec) {
  constexpr int TM = Cfg::TM, TN = Cfg::TN;
  const int tx = threadIdx.x % (Cfg::BN / TN), ty = threadIdx.x / (Cfg::BN / TN);
  A b[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = n0 + tile_offset<Cfg::BN, TN>(tx, j);
    b[j] = (has_bias && n < N) ? load_as<A>(bias[n]) : A(0);
  }
  A v[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) v[i][j] = acc[i][j] + b[j];
  }
  if (ep.has_z) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + tile_offset<Cfg::BM, TM>(ty, i);
      if (m >= M) break;
      const index_t row = (m / map.L) * map.s_outer + (m % map.L) * map.s_inner;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + tile_offset<Cfg::BN, TN>(tx, j);
        if (n < N) v[i][j] += load_as<A>(ep.z[row + n * map.s_n]);
      }
    }
  }
  if (ep.act != CC_ACT_NONE) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) v[i][j] = activate(v[i][j], ep.act);
    }
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
          A w[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) w[j] = v[4 * ic + i][4 * jc + j];
          stg4(C + (m / map.L) * map.s_outer + (m % map.L) * map.s_inner + nb, w);
        }
      } else if (along_m && mb + 3 < M) {
        // rows mb..mb+3 lie in one image (L % 4 == 0 and mb % 4 == 0)
        const index_t row = (mb / map.L) * map.s_outer + (mb % map.L);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = nb + j;
          if (n >= N) break;
          A w[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) w[i] = v[4 * ic + i][4 * jc + j];
          stg4(C + row + n * map.s_n, w);
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
            if (n < N) C[row + n * map.s_n] = store_as<T>(v[4 * ic + i][4 * jc + j]);
          }
        }
      }
    }
  }
}

}  // namespace cc
