// Fused depthwise -> pointwise convolution (a depthwise-separable layer) in one kernel, 1-d/2-d.
//
// Block = (image, SEP_P consecutive output pixels of its OH x OW plane, 8 * KT pointwise outputs).
// For each chunk of `cc` intermediate channels the block
//   1. stages the chunk's input window (the rows its pixels read, every column) in shared memory,
//   2. computes the depthwise outputs of the chunk for its pixels, adds bias_dw and applies the
//      activation, into a [channel][pixel] tile in shared memory,
//   3. accumulates the pointwise GEMM y[kp][pixel] += w_pw[kp][channel] * tile[channel][pixel] in
//      registers (each thread 4 pixels x KT outputs).
// The intermediate never touches global memory: x is read about once (window rows overlap
// between neighbouring blocks through L2) and y written once.
#include "common.cuh"
#include "stage.cuh"

#define SEP_THREADS 256
#define SEP_P 128        // output pixels per block
#define SEP_PT 4         // pixels per thread in the pointwise GEMM
#define SEP_CC 16        // most intermediate channels per chunk

namespace sep {

template <typename A>
__device__ __forceinline__ A activate(A v, int act) {
  if (act == 1) return v > A(0) ? v : A(0);
  if (act == 2) return v < A(0) ? A(0) : (v > A(6) ? A(6) : v);
  return v;
}

}  // namespace sep

// x: (N, C, H, W) or (N, H, W, C) through strides; w_dw: (Cm, taps) with Cm = mult * C; w_pw:
// (Kp, Cm); y contiguous (N, Kp, OH, OW) or (N, OH, OW, Kp).  H = 1 for 1-d problems.
// Shared memory: tile SEP_CC x SEP_P, pointwise weights SEP_CC x 8 * KT, depthwise weights
// SEP_CC x taps, windows cc x rows_max x pitch.
template <typename T, int KT>
__global__ void __launch_bounds__(SEP_THREADS)
separable_fused(const T* __restrict__ x,
                const T* __restrict__ w_dw,
                const T* __restrict__ b_dw,
                const T* __restrict__ w_pw,
                const T* __restrict__ b_pw,
                T* __restrict__ y,
                const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int has_b_dw = (int)prm[0], has_b_pw = (int)prm[1], act = (int)prm[2],
      channels_last = (int)prm[3], Cm = (int)prm[4], mult = (int)prm[5], Kp = (int)prm[6],
      H = (int)prm[7], W = (int)prm[8], OH = (int)prm[9], OW = (int)prm[10], KH = (int)prm[11],
      KW = (int)prm[12], SH = (int)prm[13], SW = (int)prm[14], DH = (int)prm[15],
      DW = (int)prm[16], PH = (int)prm[17], PW = (int)prm[18];
  const cc::index_t xsn = prm[19], xsc = prm[20], xsh = prm[21], xsw = prm[22];
  const int pixel_tiles = (int)prm[23], cc_chunk = (int)prm[24], rows_max = (int)prm[25],
      pitch = (int)prm[26];
  typedef typename cc::acc_type<T>::type A;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ cc::index_t zoff[SEP_CC];                   // each chunk channel's input plane
  const int taps = KH * KW;
  A* tile = reinterpret_cast<A*>(smem_raw);           // [SEP_CC][SEP_P]
  A* wt = tile + SEP_CC * SEP_P;                         // [SEP_CC][8 * KT]
  A* wd = wt + SEP_CC * 8 * KT;                          // [SEP_CC][taps]
  A* win = wd + SEP_CC * taps;                           // [cc][rows_max][pitch]
  const int t = threadIdx.x;
  const int n = blockIdx.x / pixel_tiles;
  const int OHW = OH * OW;
  const int p0 = (blockIdx.x % pixel_tiles) * SEP_P;
  const int kp0 = blockIdx.y * 8 * KT;
  const int oh_a = p0 / OW;
  const int p_last = min(p0 + SEP_P, OHW) - 1;
  const int rows = (p_last / OW - oh_a) * SH + (KH - 1) * DH + 1;
  const int cols = (OW - 1) * SW + (KW - 1) * DW + 1;
  const int r0 = oh_a * SH - PH, c0 = -PW;               // window origin in x
  const T* xn = x + n * xsn;

  // This thread's depthwise pixel (fixed over the chunks) and its place in the window.
  const int dp = t % SEP_P, dc0 = t / SEP_P;
  const int dpix = p0 + dp;
  const bool d_live = dpix < OHW;
  const int d_off = d_live ? ((dpix / OW - oh_a) * SH) * pitch + (dpix % OW) * SW : 0;

  // This thread's pointwise block: pixels 4 * pg .. 4 * pg + 3, outputs kp0 + kg * KT + i.
  const int pg = t % (SEP_P / SEP_PT), kg = t / (SEP_P / SEP_PT);
  A acc[KT][SEP_PT];
#pragma unroll
  for (int i = 0; i < KT; ++i)
#pragma unroll
    for (int j = 0; j < SEP_PT; ++j) acc[i][j] = A(0);

  for (int m0 = 0; m0 < Cm; m0 += cc_chunk) {
    const int cc = min(cc_chunk, Cm - m0);
    __syncthreads();  // the previous chunk's window, tile and weights are consumed
    // 1. the window of each channel of the chunk (zeros outside the image), coalesced along W
    //    (channels-first) or along the channels (channels-last); the chunk's depthwise taps
    if (t < cc) zoff[t] = (cc::index_t)((m0 + t) / mult) * xsc;
    for (int e = t; e < cc * taps; e += SEP_THREADS)
      wd[e] = cc::load_as<A>(w_dw[(cc::index_t)m0 * taps + e]);
    __syncthreads();
    if (!channels_last) {
      cc::stage_planes(win, xn, zoff, cc, rows, cols, rows_max, pitch, r0, c0, H, W, xsh, xsw, t,
                       SEP_THREADS);
    } else {
      cc::stage_box(win, rows, cols, cc, t, SEP_THREADS,
          [&](int r, int col, int c) -> A {
            const int ih = r0 + r, iw = c0 + col;
            return ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                       ? cc::load_as<A>(xn[zoff[c] + ih * xsh + iw * xsw]) : A(0);
          },
          [&](int r, int col, int c) { return (c * rows_max + r) * pitch + col; });
    }
    // the chunk's pointwise weights, transposed to [channel][output] for broadcast reads
    for (int e = t; e < cc * 8 * KT; e += SEP_THREADS) {
      const int c = e / (8 * KT), k = e - c * (8 * KT);
      wt[e] = kp0 + k < Kp ? cc::load_as<A>(w_pw[(cc::index_t)(kp0 + k) * Cm + m0 + c]) : A(0);
    }
    __syncthreads();
    // 2. depthwise outputs of the chunk for this block's pixels
    for (int c = dc0; c < cc; c += SEP_THREADS / SEP_P) {
      A v = A(0);
      if (d_live) {
        const A* wc = win + c * rows_max * pitch + d_off;
        const A* f = wd + c * taps;
        for (int kh = 0; kh < KH; ++kh)
          for (int kw = 0; kw < KW; ++kw)
            v += wc[kh * DH * pitch + kw * DW] * f[kh * KW + kw];
        if (has_b_dw) v += cc::load_as<A>(b_dw[m0 + c]);
        v = sep::activate(v, act);
      }
      tile[c * SEP_P + dp] = v;
    }
    __syncthreads();
    // 3. pointwise GEMM on the chunk
    for (int c = 0; c < cc; ++c) {
      A d[SEP_PT], f[KT];
#pragma unroll
      for (int j = 0; j < SEP_PT; ++j) d[j] = tile[c * SEP_P + pg * SEP_PT + j];
#pragma unroll
      for (int i = 0; i < KT; ++i) f[i] = wt[c * 8 * KT + kg * KT + i];
#pragma unroll
      for (int i = 0; i < KT; ++i)
#pragma unroll
        for (int j = 0; j < SEP_PT; ++j) acc[i][j] += f[i] * d[j];
    }
  }
  // epilogue: + bias_pw, store
#pragma unroll
  for (int i = 0; i < KT; ++i) {
    const int kp = kp0 + kg * KT + i;
    if (kp >= Kp) continue;
    const A b = has_b_pw ? cc::load_as<A>(b_pw[kp]) : A(0);
#pragma unroll
    for (int j = 0; j < SEP_PT; ++j) {
      const int pix = p0 + pg * SEP_PT + j;
      if (pix >= OHW) continue;
      const cc::index_t o = channels_last ? ((cc::index_t)n * OHW + pix) * Kp + kp
                                          : ((cc::index_t)n * Kp + kp) * OHW + pix;
      y[o] = cc::store_as<T>(acc[i][j] + b);
    }
  }
}
