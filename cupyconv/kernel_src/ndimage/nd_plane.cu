// cupyconv.ndimage's real float32 / float64 filters on the row walk of plane_walk.cuh (the walk of
// the signal API's filter_plane and of the depthwise plane kernel): no staged tile, no block
// barrier after the taps, loads always in flight.  The staged kernels of ndimage.cu (nd_dense_tile,
// nd_sep2d) wait on a barrier between staging a tile and using it and reached about a third of the
// copy rate on a 4096^2 float32 image; this walk reads rows straight from memory (L1 serves the
// overlap between neighbouring lanes and chunks).
//
// The array is a stack of B volumes of D x H x W (C-contiguous; a 2-d image is B = D = 1), the
// output B x OD x OH x OW:
//
//   SEP == 0 (dense):  y[b, o, i, j] = (sum_{kd, kh, kw} w[kd, kh, kw] X(b, o - PD + kd,
//                                        i - PH + kh, j - PW + kw)) / div
//   SEP == 1 (separable, KD == 1): the last-axis pass first, then the second-last:
//                      h[b, o, r, j] = (sum_kw wx[kw] X(b, o, r, j - PW + kw)) / div_x
//                      y[b, o, i, j] = (sum_kh wy[kh] H(b, o, i - PH + kh, j)) / div_y
//                      where H is h read through the boundary mode along the rows (rows outside
//                      the image are cval under mode constant: the second pass pads the first's
//                      output, as two 1-d passes do).
//
// The host (cupyconv/_ndimage/passes.py plane_plan) sends only what measured faster here than on
// the staged kernels: KD == 1 (a stack of 2-d filters) and separable pairs with KH <= 3; the
// kernel itself takes any KD and KH.
//
// X reads the input through the boundary mode (boundary.cuh: constant is BOUNDARY_FILL with cval,
// reflect BOUNDARY_SYMM, wrap, nearest, mirror), independently per axis.  Planes outside the
// volume (constant mode) are cval planes.
//
// w (the host's weights buffer, type T): dense, KD x KH x KW taps, cval, div; separable, KW taps
// along the last axis, KH along the second-last, cval, div_x, div_y.
//
// Work split as filter_plane: a block of FP_WARPS warps; a warp owns a strip of 128 output
// columns (4 per lane) by RW = FP_CHUNKS * RY rows of one output plane; grid x = strips x row
// bands, grid y = output planes (grid-stride).  Strips start at column 128 s - d, with d < 4
// making each lane's first input column a multiple of 4 (aligned 16-byte row loads).
//
// prm: B, D, H, W, OD, OH, OW, KD, KH, KW, PD, PH, PW, boundary, tiles_w, d, vec_in, vec_out.
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

// Shared memory (the host mirrors it: cupyconv/_ndimage/passes.py plane_plan): dense, KD x KH x KWB
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
  const int B = (int)prm[0], D = (int)prm[1], H = (int)prm[2], W = (int)prm[3], OD = (int)prm[4],
      OH = (int)prm[5], OW = (int)prm[6], KD = (int)prm[7], KH = KF ? KF : (int)prm[8],
      KW = KF ? KF : (int)prm[9], PD = (int)prm[10], PH = (int)prm[11], PW = (int)prm[12], boundary = (int)prm[13],
      tiles_w = (int)prm[14], d = (int)prm[15], vec_in = (int)prm[16], vec_out = (int)prm[17];
  const int RY = fp::rows_per_thread<T>::value, RW = np::CHUNKS * RY, TW = np::TW;
  const int ntaps = SEP ? KW + KH : KD * KH * KW;
  const int staged = SEP ? KWB + KH : KD * KH * KWB;
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
      const int r = i / KWB, c = i - r * KWB;  // r: kd * KH + kh
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
  const int planes = B * OD;

  for (int plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int b = plane / OD, od = plane - b * OD;
    T* yp = y + (cc::index_t)plane * OH * OW;
    for (int chunk = 0; chunk < np::CHUNKS; ++chunk) {
      const int oh0 = oh_warp + chunk * RY;
      if (oh0 >= OH) break;  // warp-uniform
      T acc[RY][4];
#pragma unroll
      for (int i = 0; i < RY; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = T(0);
      const int ih0 = oh0 - PH;
      if (SEP) {
        const T* xp = x + (cc::index_t)plane * H * W;  // (KD == 1: OD == D)
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
        for (int kd = 0; kd < KD; ++kd) {
          const int id = cc::boundary_index(od - PD + kd, D, boundary);
          // a cval plane (mode constant): every row of it reads as the fill (H = 0 maps all out)
          const T* xp = x + ((cc::index_t)b * D + (id < 0 ? 0 : id)) * H * W;
          const T* tk = taps + kd * KH * KWB;
          fp::walk_rows<T, T, KWB, false, 0>(xp, ih0, RY + KH - 1, c0, id < 0 ? 0 : H, W, KW,
                                              boundary, cols, cval,
                                              [&](int r, const fp::Window<T, KWB>& cur) {
#pragma unroll
            for (int i = 0; i < RY; ++i) {
              const int kh = r - i;
              if (kh >= 0 && kh < KH) {  // uniform: input row r feeds output row i via tap row kh
                T f[KWB / 4][4];
#pragma unroll
                for (int q = 0; q < KWB / 4; ++q) cc::load4(tk + kh * KWB + 4 * q, f[q]);
#pragma unroll
                for (int kw = 0; kw < KWB; ++kw) {
                  if (kw < KW) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] += cur[j + kw] * f[kw / 4][kw % 4];
                  }
                }
              }
            }
          });
        }
      }
      const T dv = SEP ? div_y : div;
      if (dv != T(1)) {  // (uniform filters: their exact sums divided once, as SciPy does)
#pragma unroll
        for (int i = 0; i < RY; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = acc[i][j] / dv;
      }
      fp::store_chunk<T, RY>(yp, acc, oh0, OH, OW, ow0, lane, vec_out,
                             obuf + warp * RY * TW);
    }
  }
}
