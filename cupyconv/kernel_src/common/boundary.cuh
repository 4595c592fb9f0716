// Boundary modes of the signal API (SciPy's convolve2d: fill, wrap, symm), applied where a kernel
// stages its input tile, never per tap.  Shared by filter_direct.cu and filter_plane.cu.
#pragma once
#include "common.cuh"

namespace cc {

enum { BOUNDARY_FILL = 0, BOUNDARY_WRAP = 1, BOUNDARY_SYMM = 2 };

// Index of coordinate i in [0, n) under the boundary mode, or -1 where the fill value applies.
// Wrap and symmetric repeat with periods n and 2n, so any overhang (a filter larger than the
// input) maps like SciPy's convolve2d.
__device__ __forceinline__ int boundary_index(int i, int n, int mode) {
  if ((unsigned)i < (unsigned)n) return i;
  if (mode == BOUNDARY_FILL) return -1;
  if (mode == BOUNDARY_WRAP) {
    const int m = i % n;
    return m < 0 ? m + n : m;
  }
  int m = i % (2 * n);
  if (m < 0) m += 2 * n;
  return m < n ? m : 2 * n - 1 - m;
}

}  // namespace cc
