// Boundary modes of the row-walk and signal kernels, applied where a kernel stages or loads its
// input rows, never per tap: SciPy's convolve2d modes (fill, wrap, symm) and, for cupyconv.ndimage
// on the walk (ndimage/nd_plane.cu), scipy.ndimage's nearest and mirror (its constant, wrap and
// reflect are fill, wrap and symm).  The host's codes: cupyconv/_signal/plan.py BOUNDARY_CODE,
// cupyconv/_ndimage/passes.py WALK_BOUNDARY.
#pragma once
#include "common.cuh"

namespace cc {

enum { BOUNDARY_FILL = 0, BOUNDARY_WRAP = 1, BOUNDARY_SYMM = 2, BOUNDARY_NEAREST = 3, BOUNDARY_MIRROR = 4 };

// Index of coordinate i in [0, n) under the boundary mode, or -1 where the fill value applies.
// Wrap, symmetric and mirror repeat with periods n, 2n and 2n - 2, so any overhang (a filter
// larger than the input) maps like SciPy's convolve2d and scipy.ndimage's line extension:
//   symm    b a | a b c d | d c      mirror  c b | a b c d | c b      nearest  a a | a b c d | d d
// (mirror of a single element repeats it).
__device__ __forceinline__ int boundary_index(int i, int n, int mode) {
  if ((unsigned)i < (unsigned)n) return i;
  if (mode == BOUNDARY_FILL) return -1;
  if (mode == BOUNDARY_WRAP) {
    const int m = i % n;
    return m < 0 ? m + n : m;
  }
  if (mode == BOUNDARY_NEAREST) return i < 0 ? 0 : n - 1;
  if (mode == BOUNDARY_MIRROR) {
    if (n == 1) return 0;
    int m = i % (2 * n - 2);
    if (m < 0) m += 2 * n - 2;
    return m < n ? m : 2 * n - 2 - m;
  }
  int m = i % (2 * n);
  if (m < 0) m += 2 * n;
  return m < n ? m : 2 * n - 1 - m;
}

}  // namespace cc
