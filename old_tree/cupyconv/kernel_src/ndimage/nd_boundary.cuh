// Boundary modes of cupyconv.ndimage (scipy.ndimage's filter modes), applied where a kernel stages
// its input, never per tap.  The host mirror is cupyconv/_ndimage/boundary.py (map_index): change
// both together; the CPU suite checks both against SciPy and runs this file's kernels as host C++.
//
// SciPy's grid-wrap, grid-constant and grid-mirror are, for filters, the same as wrap, constant and
// reflect: the host folds them into these codes.
#pragma once
#include "common.cuh"

#if !defined(ND_NEAREST) || !defined(ND_WRAP) || !defined(ND_REFLECT) || !defined(ND_MIRROR) || \
    !defined(ND_CONSTANT)
#error "compile with the defines of cupyconv._ndimage.kernels.ND_CONSTANTS"
#endif

namespace nd {

typedef long long index_t;

// Index of coordinate i in [0, n) under `mode`, or -1 where the constant (cval) applies.  Every
// mode except constant is periodic (nearest aside), so any overhang -- a filter longer than the
// axis -- maps by repeating the pattern, as SciPy's 1-d line extension does:
//   nearest  a a | a b c d | d d      wrap    c d | a b c d | a b
//   reflect  b a | a b c d | d c      mirror  c b | a b c d | c b
// An axis of length 1 repeats its one element under reflect and mirror.
__device__ __forceinline__ index_t map_index(index_t i, index_t n, int mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case ND_NEAREST:
      return i < 0 ? 0 : n - 1;
    case ND_WRAP: {
      const index_t m = i % n;
      return m < 0 ? m + n : m;
    }
    case ND_REFLECT: {
      const index_t p = 2 * n;
      index_t m = i % p;
      if (m < 0) m += p;
      return m < n ? m : p - 1 - m;
    }
    case ND_MIRROR: {
      if (n == 1) return 0;
      const index_t p = 2 * n - 2;
      index_t m = i % p;
      if (m < 0) m += p;
      return m < n ? m : p - m;
    }
    default:  // ND_CONSTANT
      return -1;
  }
}

}  // namespace nd
