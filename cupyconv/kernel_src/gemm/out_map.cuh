// Where row m of a GEMM result lies in memory: shared by the tile epilogue (epilogue.cuh) and the
// split-K reduction (splitk_reduce.cu), which must place every element alike.
#pragma once
#include "common.cuh"

namespace cc {

// Row m at (m / L) * s_outer + ((m % L) / R) * s_row + (m % L % R) * s_inner: L rows per outer
// entry (an image), split into runs of R rows (an output row of pixels; R == L: one run, no
// second division).  Row indices are below 2^31 (the host splits larger problems into slabs), so
// the divisions are 32-bit.
struct OutMap {
  index_t L, s_outer, s_inner, s_n, R, s_row;

  __device__ __forceinline__ index_t row(int m) const {
    const int l = (int)L, q = m / l, p = m - q * l;
    if (R == L) return q * s_outer + p * s_inner;
    const int r = (int)R, a = p / r;
    return q * s_outer + a * s_row + (p - a * r) * s_inner;
  }
};

// A map without the middle level.
__device__ __forceinline__ OutMap plain_map(index_t L, index_t s_outer, index_t s_inner,
                                            index_t s_n) {
  return OutMap{L, s_outer, s_inner, s_n, L, 0};
}

}  // namespace cc
