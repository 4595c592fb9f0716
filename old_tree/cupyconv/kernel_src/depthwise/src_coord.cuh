// The depthwise kernels' one coordinate mapping (depthwise.cu, depthwise_cl.cu): which source
// pixel a destination pixel reads through a tap, for the forward pass and its transpose.
#pragma once

namespace dw {

// Source coordinate of destination coordinate o through tap t along one dim, or -1 if none.
// Forward: the input pixel read by tap t of output o.  Transposed (backward-data): the output
// pixel whose tap t reads input o, when the stride divides.
template <bool TRANSPOSED>
__device__ __forceinline__ int src_coord(int o, int t, int S, int Dl, int P, int n) {
  if (!TRANSPOSED) {
    const int i = o * S - P + t * Dl;
    return (unsigned)i < (unsigned)n ? i : -1;
  }
  const int q = o + P - t * Dl;
  if (q < 0) return -1;
  const int i = q / S;
  return (i * S == q && i < n) ? i : -1;
}

}  // namespace dw
