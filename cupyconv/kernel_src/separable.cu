// Fused depthwise -> pointwise convolution (a depthwise-separable layer) in one kernel, 1-d/2-d.
//
// Block = (image, TH x TW tile of output pixels, KG * KT pointwise outputs).  For each chunk of
// `cc` intermediate channels the block
//   1. stages the chunk's input windows (the tile's rows and columns plus halo) in shared memory,
//      with 4-element vector loads where the rows allow (stage.cuh),
//   2. computes the chunk's depthwise outputs for the tile, adds bias_dw and applies the
//      activation, into a [channel][TH][TW] tile in shared memory; the fixed 3x3 variant (KF = 3,
//      unit stride and dilation) gives each thread a 4-column x SEP_VR-row block and slides down
//      it, reading each window row once as two aligned 4-vectors, like the depthwise kernel,
//   3. accumulates the pointwise GEMM y[kp][pixel] += w_pw[kp][channel] * tile[channel][pixel] in
//      registers: each thread 4 pixels (one 4-vector of the tile) x KT outputs, the KT weights
//      broadcast to the warp.
// The intermediate never touches global memory: x is read about once (halo rows come from L2)
// and y written once.  2-D tiles (whole rows where they fit) keep the halo small.
#include "common.cuh"
#include "stage.cuh"

#define SEP_THREADS 256
#define SEP_CC 16   // most intermediate channels per chunk
#define SEP_VR 4    // rows per thread in the 3x3 depthwise step
// Register budget: 3 resident blocks (80 registers) overlap one block's staging with another's
// arithmetic; double accumulators need two registers each and would spill, so 2 blocks there.
#define SEP_MIN_BLOCKS(T) (sizeof(T) == 8 ? 2 : 3)

namespace sep {

template <typename A>
__device__ __forceinline__ A activate(A v, int act) {
  if (act == 1) return v > A(0) ? v : A(0);
  if (act == 2) return v < A(0) ? A(0) : (v > A(6) ? A(6) : v);
  return v;
}

__host__ __device__ __forceinline__ int round4(int v) { return (v + 3) & ~3; }

}  // namespace sep

// x: (N, C, H, W) or (N, H, W, C) through strides; w_dw: (Cm, taps) with Cm = mult * C; w_pw:
// (Kp, Cm); y contiguous (N, Kp, OH, OW) or (N, OH, OW, Kp).  H = 1 for 1-d problems.
// Shared memory (each part 4-element aligned): tile cc x TH x TW, pointwise weights cc x KB,
// depthwise weights cc x taps, windows cc x rows_max x pitch.
// Grid: x = N * tiles_h * tiles_w, y = ceil(Kp / KB) with KB = KG * KT.
template <typename T, int KT, int KF>
__global__ void __launch_bounds__(SEP_THREADS, SEP_MIN_BLOCKS(T))
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
  const int TH = (int)prm[23], TW = (int)prm[24], tiles_h = (int)prm[25], tiles_w = (int)prm[26],
      KG = (int)prm[27], cc_chunk = (int)prm[28], rows_max = (int)prm[29], pitch = (int)prm[30],
      vec = (int)prm[31];
  typedef typename cc::acc_type<T>::type A;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ cc::index_t zoff[SEP_CC];                   // each chunk channel's input plane
  const int taps = KH * KW, P = TH * TW, KB = KG * KT;
  A* tile = reinterpret_cast<A*>(smem_raw);              // [cc][TH][TW]
  A* wt = tile + cc_chunk * P;                           // [cc][KB]
  A* wd = wt + sep::round4(cc_chunk * KB);               // [cc][taps]
  A* win = wd + sep::round4(cc_chunk * taps);            // [cc][rows_max][pitch]
  const int t = threadIdx.x;
  const int tiles = tiles_h * tiles_w;
  const int n = blockIdx.x / tiles;
  const int oh0 = (blockIdx.x % tiles) / tiles_w * TH, ow0 = (blockIdx.x % tiles) % tiles_w * TW;
  const int th = min(TH, OH - oh0), tw = min(TW, OW - ow0);  // this tile's live extent
  const int rows = (th - 1) * SH + (KH - 1) * DH + 1, cols = (tw - 1) * SW + (KW - 1) * DW + 1;
  const int r0 = oh0 * SH - PH, c0 = ow0 * SW - PW;      // window origin in x
  const T* xn = x + n * xsn;
  const int kp0 = blockIdx.y * KB;

  // This thread's pointwise block: tile pixels 4 pg .. 4 pg + 3 (one row: TW % 4 == 0), outputs
  // kp0 + kg * KT + i.  Threads beyond PG * KG only help with staging and the depthwise step.
  const int PG = P / 4;
  const int pg = t % PG, kg = t / PG;
  const bool pw_live = kg < KG;
  A acc[KT][4];
#pragma unroll
  for (int i = 0; i < KT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = A(0);

  for (int m0 = 0; m0 < Cm; m0 += cc_chunk) {
    const int cc = min(cc_chunk, Cm - m0);
    __syncthreads();  // the previous chunk's windows, tile and weights are consumed
    if (t < cc) zoff[t] = (cc::index_t)((m0 + t) / mult) * xsc;
    for (int e = t; e < cc * taps; e += SEP_THREADS)
      wd[e] = cc::load_as<A>(w_dw[(cc::index_t)m0 * taps + e]);
    // the chunk's pointwise weights, transposed to [channel][output] for broadcast reads
    for (int e = t; e < cc * KB; e += SEP_THREADS) {
      const int c = e / KB, k = e - c * KB;
      wt[e] = kp0 + k < Kp ? cc::load_as<A>(w_pw[(cc::index_t)(kp0 + k) * Cm + m0 + c]) : A(0);
    }
    __syncthreads();
    // 1. the windows of the chunk's channels (zeros outside the image)
    if (!channels_last) {
      cc::stage_windows(win, xn, zoff, cc, rows, cols, rows_max, pitch, r0, c0, H, W, xsh, xsw,
                        vec, t, SEP_THREADS);
    } else {
      cc::stage_box(win, rows, cols, cc, t, SEP_THREADS,
          [&](int r, int col, int c) -> A {
            const int ih = r0 + r, iw = c0 + col;
            return ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                       ? cc::load_as<A>(xn[zoff[c] + ih * xsh + iw * xsw]) : A(0);
          },
          [&](int r, int col, int c) { return (c * rows_max + r) * pitch + col; });
    }
    __syncthreads();
    // 2. the chunk's depthwise outputs for the tile (+ bias_dw, activation) into `tile`
    if (KF == 3) {
      const int quads = TW / 4, rblocks = (th + SEP_VR - 1) / SEP_VR;
      for (int item = t; item < cc * quads * rblocks; item += SEP_THREADS) {
        const int c = item / (quads * rblocks), rest = item - c * (quads * rblocks);
        const int rb = rest / quads, q = rest - rb * quads;
        const int vr = min(SEP_VR, th - rb * SEP_VR);
        const A* f = wd + c * 9;
        A wr[9];
#pragma unroll
        for (int k = 0; k < 9; ++k) wr[k] = f[k];
        A d[SEP_VR][4];
#pragma unroll
        for (int j = 0; j < SEP_VR; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) d[j][i] = A(0);
        const A* base = win + (c * rows_max + rb * SEP_VR) * pitch + 4 * q;
#pragma unroll
        for (int r = 0; r < SEP_VR + 2; ++r) {
          A v[8];
          cc::window_row8(base, r, vr + 2, pitch, v);
#pragma unroll
          for (int kh = 0; kh < 3; ++kh) {
            const int j = r - kh;
            if (j < 0 || j >= SEP_VR) continue;
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int kw = 0; kw < 3; ++kw) d[j][i] += v[i + kw] * wr[kh * 3 + kw];
          }
        }
        const A b = has_b_dw ? cc::load_as<A>(b_dw[m0 + c]) : A(0);
        A* out = tile + (c * TH + rb * SEP_VR) * TW + 4 * q;
#pragma unroll
        for (int j = 0; j < SEP_VR; ++j)
          if (j < vr) {
#pragma unroll
            for (int i = 0; i < 4; ++i) d[j][i] = sep::activate(d[j][i] + b, act);
            cc::stg4(out + j * TW, d[j]);
          }
      }
    } else {
      for (int item = t; item < cc * P; item += SEP_THREADS) {
        const int c = item / P, pix = item - c * P;
        const int r = pix / TW, col = pix - r * TW;
        A v = A(0);
        if (r < th && col < tw) {
          const A* wc = win + (c * rows_max + r * SH) * pitch + col * SW;
          const A* f = wd + c * taps;
          for (int kh = 0; kh < KH; ++kh)
            for (int kw = 0; kw < KW; ++kw)
              v += wc[kh * DH * pitch + kw * DW] * f[kh * KW + kw];
          if (has_b_dw) v += cc::load_as<A>(b_dw[m0 + c]);
          v = sep::activate(v, act);
        }
        tile[item] = v;
      }
    }
    __syncthreads();
    // 3. pointwise GEMM on the chunk
    if (pw_live) {
      const A* fw = wt + kg * KT;
      for (int c = 0; c < cc; ++c) {
        A d[4], f[KT];
        cc::load4(tile + c * P + 4 * pg, d);
#pragma unroll
        for (int i = 0; i < KT; ++i) f[i] = fw[c * KB + i];
#pragma unroll
        for (int i = 0; i < KT; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += f[i] * d[j];
      }
    }
  }
  if (!pw_live) return;
  // epilogue: + bias_pw, store the live pixels
  const int r = (4 * pg) / TW, col = 4 * pg - r * TW;
  const int oh = oh0 + r, ow = ow0 + col;
  if (r >= th) return;
  const int OHW = OH * OW;
#pragma unroll
  for (int i = 0; i < KT; ++i) {
    const int kp = kp0 + kg * KT + i;
    if (kp >= Kp) continue;
    const A b = has_b_pw ? cc::load_as<A>(b_pw[kp]) : A(0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (col + j >= tw) continue;
      const int pix = oh * OW + ow + j;
      const cc::index_t o = channels_last ? ((cc::index_t)n * OHW + pix) * Kp + kp
                                          : ((cc::index_t)n * Kp + kp) * OHW + pix;
      y[o] = cc::store_as<T>(acc[i][j] + b);
    }
  }
}
