// cupyconv.ndimage's real float32 / float64 filters on the row walk of plane_walk.cuh (the walk of
// the signal API's filter_plane and of the depthwise plane kernel): no staged tile, no block
// barrier after the taps, loads always in flight.  The staged kernels of ndimage.cu (nd_dense_tile,
// nd_sep2d) wait on a barrier between staging a tile and using it and reached about a third of the
// copy rate on a 4096^2 float32 image; this walk reads rows straight from memory (L1 serves the
// overlap between neighbouring lanes and chunks).
//
// The array is a stack of B planes of H x W (C-contiguous; a 2-d image is B = 1), the output the
// same shape:
//
//   SEP == 0 (dense):  y[b, i, j] = (sum_{kh, kw} w[kh, kw] X(b, i - PH + kh, j - PW + kw)) / div
//                      (fp::walk_chunk, as filter_plane)
//   SEP == 1 (separable): the last-axis pass first, then the second-last:
//                      h[b, r, j] = (sum_kw wx[kw] X(b, r, j - PW + kw)) / div_x
//                      y[b, i, j] = (sum_kh wy[kh] H(b, i - PH + kh, j)) / div_y
//                      where H is h read through the boundary mode along the rows (rows outside
//                      the image are cval under mode constant: the second pass pads the first's
//                      output, as two 1-d passes do).
//
// The host (cupyconv/_ndimage/passes.py plane_plan) sends separable pairs with KH <= 3 only: a
// chunk of RY output rows walks RY + KH - 1 input rows, and longer column filters ran faster on
// nd_sep2d.  (A dense variant that also walked KD planes of a volume ran 3-d filters slower than
// nd_dense_tile and was removed: benchmarks/notes/ndimage.md, "Session 14".)
//
// X reads the input through the boundary mode (boundary.cuh: constant is BOUNDARY_FILL with cval,
// reflect BOUNDARY_SYMM, wrap, nearest, mirror), independently per axis.
//
// w (the host's weights buffer, type T): dense, KH x KW taps, cval, div; separable, KW taps along
// the last axis, KH along the second-last, cval, div_x, div_y.
//
// Work split as filter_plane: a block of FP_WARPS warps; a warp owns a strip of 128 output
// columns (4 per lane) by RW = FP_CHUNKS * RY rows of one plane; grid x = strips x row bands,
// grid y = planes (grid-stride).  Strips start at column 128 s - d, with d < 4 making each lane's
// first input column a multiple of 4 (aligned 16-byte row loads).
//
// prm: B, H, W, KH, KW, PH, PW, boundary, tiles_w, d, vec_in, vec_out.
#include "plane_walk.cuh"

#if !defined(FP_WARPS) || !defined(FP_TW) || !defined(FP_CHUNKS)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif

// Resident blocks per SM the register budget is cut for (filter_plane's FP_MIN_BLOCKS).
#ifndef NP_MIN_BLOCKS
#define NP_MIN_BLOCKS(T, KWB) (sizeof(T) > 4 ? 2 : (KWB) <= 8 ? 4 : 3)
#endif

namespace np {
const int WARPS = FP_WARPS;
const int TW = FP_TW;
const int CHUNKS = FP_CHUNKS;
static_assert(TW == 4 * 32, "a strip is 4 columns per lane");
}  // namespace np

// Shared memory (the host mirrors it: cupyconv/_ndimage/passes.py plane_plan): dense, KH x KWB
// taps (columns past KW zero); separable, KWB + KH taps; then, without vec_out, RY x 128 values
// per warp for the stores.
// Template: KWB, the filter-width bucket; KF, a KF x KF filter (dense) fixed at compile time (0:
// any size; the host passes the same sizes), so the taps' column branches resolve, as in
// filter_plane; SEP, separable.
template <typename T, int KWB, int KF, int SEP>
__global__ void __launch_bounds__(32 * FP_WARPS, NP_MIN_BLOCKS(T, KWB))
nd_plane(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
         const long long* __restrict__ prm) {
  static_assert(KF <= KWB && !(KF && SEP), "KF: a dense square filter within the width bucket");
  const int B = (int)prm[0], H = (int)prm[1], W = (int)prm[2], KH = KF ? KF : (int)prm[3],
      KW = KF ? KF : (int)prm[4], PH = (int)prm[5], PW = (int)prm[6], boundary = (int)prm[7],
      tiles_w = (int)prm[8], d = (int)prm[9], vec_in = (int)prm[10], vec_out = (int)prm[11];
  const int RY = fp::rows_per_thread<T>::value, RW = np::CHUNKS * RY, TW = np::TW;
  const int ntaps = SEP ? KW + KH : KH * KW;
  const int staged = SEP ? KWB + KH : KH * KWB;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const taps = reinterpret_cast<T*>(smem_raw);
  T* const obuf = taps + 4 * ((staged + 3) / 4);  // 16-byte aligned
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < staged; i += blockDim.x) {
    T v = T(0);
    if (SEP) {
      if (i < KWB) {
        if (i < KW) v = w[i];
      } else {
        v = w[KW + i - KWB];
      }
    } else {
      const int r = i / KWB, c = i - r * KWB;
      if (c < KW) v = w[r * KW + c];
    }
    taps[i] = v;
  }
  const T cval = w[ntaps], div = w[ntaps + 1], div_y = SEP ? w[ntaps + 2] : T(1);
  __syncthreads();
  // separable: the last-axis taps in registers (every row uses all of them)
  T fx[SEP ? KWB : 1];
#pragma unroll
  for (int kw = 0; kw < (SEP ? KWB : 1); ++kw) fx[kw] = taps[kw];

  const int strip = blockIdx.x % tiles_w, band = blockIdx.x / tiles_w;
  const int ow0 = strip * TW - d, iw0 = ow0 - PW;
  const int oh_warp = (band * np::WARPS + warp) * RW;
  const int cols = vec_in && iw0 >= 0 && iw0 + TW + KWB <= W ? fp::COLS_INSIDE : fp::COLS_ELEMENTS;
  const int c0 = iw0 + 4 * lane;

  for (int plane = blockIdx.y; plane < B; plane += gridDim.y) {
    const T* xp = x + (cc::index_t)plane * H * W;
    T* yp = y + (cc::index_t)plane * H * W;
    for (int chunk = 0; chunk < np::CHUNKS; ++chunk) {
      const int oh0 = oh_warp + chunk * RY;
      if (oh0 >= H) break;  // warp-uniform
      const int ih0 = oh0 - PH;
      T acc[RY][4];
      if (SEP) {
#pragma unroll
        for (int i = 0; i < RY; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = T(0);
        fp::walk_rows<T, T, KWB, false, 0>(xp, ih0, RY + KH - 1, c0, H, W, KW, boundary, cols,
                                            cval, [&](int r, const fp::Window<T, KWB>& cur) {
          // the last-axis pass of row ih0 + r; a row outside the image is cval (mode constant)
          const bool fill_row = cc::boundary_index(ih0 + r, H, boundary) < 0;
          T h[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            T s = T(0);
#pragma unroll
            for (int kw = 0; kw < KWB; ++kw)
              if (kw < KW) s += cur[j + kw] * fx[kw];
            h[j] = fill_row ? cval : div == T(1) ? s : s / div;
          }
#pragma unroll
          for (int i = 0; i < RY; ++i) {
            const int kh = r - i;
            if (kh >= 0 && kh < KH) {
              const T f = taps[KWB + kh];
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[i][j] += f * h[j];
            }
          }
        });
      } else {
        fp::walk_chunk<T, T, KWB, RY, false>(acc, xp, taps, ih0, c0, H, W, KH, KW, boundary,
                                             cols, cval);
      }
      const T dv = SEP ? div_y : div;
      if (dv != T(1)) {  // (uniform filters: their exact sums divided once, as SciPy does)
#pragma unroll
        for (int i = 0; i < RY; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = acc[i][j] / dv;
      }
      fp::store_chunk<T, RY>(yp, acc, oh0, H, W, ow0, lane, vec_out, obuf + warp * RY * TW);
    }
  }
}
