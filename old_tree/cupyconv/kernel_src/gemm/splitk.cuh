// Split-K: when an M x N output has too few tiles to fill the GPU, `splits` blocks share each tile,
// each multiplying one k range; they write fp32 (accumulator-type) partial tiles to a workspace,
// and a second kernel (splitk_reduce.cu) sums the parts in a fixed order, applies the epilogue
// (bias, residual z, activation) and writes the output: deterministic, no atomics.
//
// Workspace layout: part-major, ws[(part * batch + z) * M * N + ...], each M x N matrix stored
// n-fastest when the output is (`n_fast`), m-fastest otherwise, so that the reduction reads the
// workspace and writes the output in the same coalesced order.
#pragma once
#include "epilogue.cuh"

namespace cc {

// k range [kb, ke) of split `part`: whole BK slices, as even as possible.
template <int BK>
__device__ __forceinline__ void split_range(int K, int splits, int part, int& kb, int& ke) {
  const int slices = (K + BK - 1) / BK;
  const int per = (slices + splits - 1) / splits;
  kb = min(K, part * per * BK);
  ke = min(K, (part + 1) * per * BK);
}

// `vec`: the host checked that the contiguous extent (N when n_fast, else M) is a multiple of 4,
// so the partial tiles go out as vector stores.
template <typename Cfg, typename A>
__device__ __forceinline__ void store_partial(const A (&acc)[Cfg::TM][Cfg::TN], A* ws, int part,
                                              int z, int batch, int m0, int n0, int M, int N,
                                              bool n_fast, bool vec) {
  const OutMap map = n_fast ? OutMap{M, 0, N, 1} : OutMap{M, 0, 1, M};
  A* base = ws + ((index_t)part * batch + z) * M * N;
  const Epilogue<A> plain = {base, 0, CC_ACT_NONE};  // bias, z and activation: in the reduction
  store_tile<Cfg>(acc, base, base, 0, plain, m0, n0, M, N, map, vec);
}

}  // namespace cc
