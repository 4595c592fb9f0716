// Fused depthwise -> pointwise convolution (a depthwise-separable layer) in one kernel, 1-d/2-d.
//
// Block = (image, TH x TW tile of output pixels, KG * KT pointwise outputs).  For each chunk of
// `cc` intermediate channels the block
//   1. stages the chunk's input windows (the tile's rows and columns plus halo) in shared memory;
//      where the rows allow 4-element vectors (`vec`), with asynchronous copies into two buffers,
//      chunk k + 1's copies in flight while chunk k is computed (stage.cuh: cp.async on sm_80+),
//   2. computes the chunk's depthwise outputs for the tile, adds bias_dw and applies the
//      activation, into a [channel][TH][TW] tile in shared memory; the fixed 3x3 variant (KF = 3,
//      unit stride and dilation) gives each thread a 4-column x SEP_VR-row block and slides down
//      it, reading each window row once as aligned 4-vectors, like the depthwise kernel,
//   3. accumulates the pointwise GEMM y[kp][pixel] += w_pw[kp][channel] * tile[channel][pixel] in
//      registers: each thread 4 pixels (one 4-vector of the tile) x KT outputs, the KT weights
//      broadcast to the warp.
// The intermediate never touches global memory: x is read about once (halo rows come from L2)
// and y written once.  2-D tiles (whole rows where they fit) keep the halo small.
#include "common.cuh"
#include "stage.cuh"

// SEP_THREADS and SEP_CC (most intermediate channels per chunk) come from KERNEL_CONSTANTS.
#if !defined(SEP_THREADS) || !defined(SEP_CC)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
#define SEP_WPF 3   // weights per thread prefetched in registers for the next chunk
// (the two below can be overridden by the module's defines: benchmarks/experiments/README.md: sweep_separable.py)
#ifndef SEP_VR
#define SEP_VR 4    // rows per thread in the 3x3 depthwise step
#endif
// Register budget: 2 resident blocks (128 registers, no spills).  3 blocks (80 registers) spill
// and measured 0.094-0.109 ms against 0.087 ms on the benchmark layer
// (benchmarks/notes/depthwise.md, "issue 5: fused separable kernel rebuilt").
#ifndef SEP_MIN_BLOCKS
#define SEP_MIN_BLOCKS(T) 2
#endif

namespace sep {

// The activation as a clamp to [lo, hi] (relu: [0, inf], relu6: [0, 6]; NaN passes through as
// in PyTorch); `on` false: none.  Two min/max instructions per value, no per-value branches.
template <typename A>
struct Clamp {
  bool on;
  A lo, hi;
  __device__ __forceinline__ Clamp(int act)
      : on(act != 0), lo(A(0)), hi(act == 2 ? A(6) : A(1) / A(0)) {}
  __device__ __forceinline__ A operator()(A v) const {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
  }
};

__host__ __device__ __forceinline__ int round4(int v) { return (v + 3) & ~3; }

// Two consecutive accumulator values in one shared-memory load (`p` aligned to two elements).
__device__ __forceinline__ void load2(const float* p, float& a, float& b) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  a = v.x; b = v.y;
}
__device__ __forceinline__ void load2(const double* p, double& a, double& b) {
  const double2 v = *reinterpret_cast<const double2*>(p);
  a = v.x; b = v.y;
}

// A depthwise item of the 3x3 step: channel c, rows rb * SEP_VR.., columns 4 q..
struct Item {
  int c, rb, q;
  __device__ __forceinline__ Item(int item, int quads, int rblocks) {
    c = item / (quads * rblocks);
    const int rest = item - c * (quads * rblocks);
    rb = rest / quads;
    q = rest - rb * quads;
  }
};

// Depthwise step, 3x3 unit stride: the chunk's `cc` windows (each `rows_max` x `pitch`, the
// window starting SHIFT elements into its rows) -> tile [cc][TH][TW] for the live th x TW part.
// Each item is a 4-column x SEP_VR-row block of one channel; a thread's first item (`first`,
// the same every chunk) is decomposed once by the caller.
template <int SHIFT, typename T, typename A>
__device__ __forceinline__ void depthwise3x3(const T* win, const A* wd, A* tile, const T* b_dw,
                                             int has_b_dw, const Clamp<A>& clamp, int m0, int cc,
                                             int th, int TH, int TW, int rows_max, int pitch,
                                             const Item& first) {
  const int quads = TW / 4, rblocks = (th + SEP_VR - 1) / SEP_VR;
  for (int item = threadIdx.x; item < cc * quads * rblocks; item += SEP_THREADS) {
    const Item it = item == (int)threadIdx.x ? first : Item(item, quads, rblocks);
    const int c = it.c, rb = it.rb, q = it.q;
    const int vr = min(SEP_VR, th - rb * SEP_VR);
    A wr[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) wr[k] = wd[c * 9 + k];
    A d[SEP_VR][4];
#pragma unroll
    for (int j = 0; j < SEP_VR; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[j][i] = A(0);
    const T* base = win + (c * rows_max + rb * SEP_VR) * pitch + 4 * q;
#pragma unroll
    for (int r = 0; r < SEP_VR + 2; ++r) {
      A v[6];
      cc::window_row6<SHIFT>(base, r, vr + 2, pitch, v);
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
#pragma unroll
    for (int j = 0; j < SEP_VR; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[j][i] += b;
    if (clamp.on) {
#pragma unroll
      for (int j = 0; j < SEP_VR; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) d[j][i] = clamp(d[j][i]);
    }
    A* out = tile + (c * TH + rb * SEP_VR) * TW + 4 * q;
#pragma unroll
    for (int j = 0; j < SEP_VR; ++j)
      if (j < vr) cc::stg4(out + j * TW, d[j]);
  }
}

}  // namespace sep

// x: (N, C, H, W) or (N, H, W, C) through strides; w_dw: (Cm, taps) with Cm = mult * C; w_pw:
// (Kp, Cm); y contiguous (N, Kp, OH, OW) or (N, OH, OW, Kp).  H = 1 for 1-d problems.
// Shared memory (each part 4-element aligned): tile cc x TH x TW and weights cc x (taps + KB)
// (accumulator type), then the windows in x's type: 2 (vec) or 1 buffers of cc x rows_max x pitch.
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
  // weights of the chunk: [cc][taps] depthwise, then [cc][KB] pointwise (4-aligned: pair loads)
  const int dwn = cc_chunk * taps, gap = sep::round4(dwn) - dwn;
  A* wts = tile + cc_chunk * P;
  A* wd = wts;
  A* wt = wts + dwn + gap;
  T* win0 = reinterpret_cast<T*>(wt + sep::round4(cc_chunk * KB));  // [2][cc][rows_max][pitch]
  const int buf_size = cc_chunk * rows_max * pitch;
  const int t = threadIdx.x;
  const int tiles = tiles_h * tiles_w;
  const int n = blockIdx.x / tiles;
  const int oh0 = (blockIdx.x % tiles) / tiles_w * TH, ow0 = (blockIdx.x % tiles) % tiles_w * TW;
  const int th = min(TH, OH - oh0), tw = min(TW, OW - ow0);  // this tile's live extent
  const int rows = (th - 1) * SH + (KH - 1) * DH + 1, cols = (tw - 1) * SW + (KW - 1) * DW + 1;
  const int r0 = oh0 * SH - PH, c0 = ow0 * SW - PW;      // window origin in x
  // Vector staging starts each row at the 4-aligned column c0 - shift (stage_quads_async).
  const int shift = vec ? ((c0 % 4) + 4) % 4 : 0, quads = (cols + shift + 3) / 4;
  const T* xn = x + n * xsn;
  const int kp0 = blockIdx.y * KB;
  const int chunks = (Cm + cc_chunk - 1) / cc_chunk;
  auto stage_async = [&](int k) {  // chunk k's windows into buffer k % 2
    const int m0 = k * cc_chunk;
    cc::stage_planes_async(win0 + (k & 1) * buf_size, xn,
        [&](int z) { const int m = m0 + z; return (cc::index_t)(mult == 1 ? m : m / mult) * xsc; },
        min(cc_chunk, Cm - m0), rows, quads, rows_max, pitch, r0, c0 - shift, H, W, xsh, t,
        SEP_THREADS);
  };

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

  // Weights: element e of a chunk is depthwise tap e (e < cc_chunk * taps), then pointwise
  // weight (channel, output), transposed to [channel][output] for broadcast reads.  Each thread
  // owns elements t + u * SEP_THREADS (u < SEP_WPF) of every chunk: their source offsets (less the
  // chunk's channel m0) are worked out once, and the next chunk's values are fetched into
  // registers while this one computes.  Elements beyond are loaded when stored (large kernels).
  const int wel = cc_chunk * (taps + KB);
  // (32-bit offsets: weights are small next to activations; the host checks)
  auto weight_src = [&](int e, int& c) -> int {  // offset less m0 * taps (dw) or m0 (pw); channel c
    if (e < dwn) { c = e / taps; return e; }
    e -= dwn;
    c = e / KB;
    const int kk = e - c * KB;
    return kp0 + kk < Kp ? (kp0 + kk) * Cm + c : -1;
  };
  auto weight = [&](int e, int off, int c, int m0, int cc) -> T {
    if (c >= cc || off < 0) return cc::zero<T>();
    return e < dwn ? w_dw[m0 * taps + off] : w_pw[off + m0];
  };
  int woff[SEP_WPF];
  int wch[SEP_WPF];
#pragma unroll
  for (int u = 0; u < SEP_WPF; ++u) {
    const int e = t + u * SEP_THREADS;
    woff[u] = e < wel ? weight_src(e, wch[u]) : -1;
    if (e >= wel) wch[u] = SEP_CC;
  }
  T wreg[SEP_WPF];
  auto fetch = [&](int k) {
    const int m0 = k * cc_chunk, cc = min(cc_chunk, Cm - m0);
#pragma unroll
    for (int u = 0; u < SEP_WPF; ++u) wreg[u] = weight(t + u * SEP_THREADS, woff[u], wch[u], m0, cc);
  };

  const sep::Clamp<A> clamp(act);
  const sep::Item first(t, TW / 4, (th + SEP_VR - 1) / SEP_VR);  // (3x3 step) fixed per thread
  fetch(0);
  if (vec) {
    stage_async(0);
    cc::async_commit();
  }
  for (int k = 0; k < chunks; ++k) {
    const int m0 = k * cc_chunk, cc = min(cc_chunk, Cm - m0);
    const T* win = win0 + (vec ? (k & 1) * buf_size : 0);
    __syncthreads();  // the previous chunk's windows, tile and weights are consumed
    if (vec) {  // the next chunk's copies go out first: they overlap this chunk's work
      if (k + 1 < chunks) stage_async(k + 1);
      cc::async_commit();
    }
#pragma unroll
    for (int u = 0; u < SEP_WPF; ++u) {
      const int e = t + u * SEP_THREADS;
      if (e < wel) wts[e + (e < dwn ? 0 : gap)] = cc::load_as<A>(wreg[u]);
    }
    for (int e = t + SEP_WPF * SEP_THREADS; e < wel; e += SEP_THREADS) {
      int c;
      const int off = weight_src(e, c);
      wts[e + (e < dwn ? 0 : gap)] = cc::load_as<A>(weight(e, off, c, m0, cc));
    }
    if (k + 1 < chunks) fetch(k + 1);
    // 1. this chunk's windows: arrived (vec), or staged now (zeros outside the image)
    if (vec) {
      cc::async_wait<1>();
    } else {
      if (t < cc) zoff[t] = (cc::index_t)((m0 + t) / mult) * xsc;
      __syncthreads();
      T* wbuf = win0;
      if (!channels_last) {
        cc::stage_planes(wbuf, xn, zoff, cc, rows, cols, rows_max, pitch, r0, c0, H, W, xsh, xsw,
                         t, SEP_THREADS);
      } else {
        cc::stage_box(wbuf, rows, cols, cc, t, SEP_THREADS,
            [&](int r, int col, int c) -> T {
              const int ih = r0 + r, iw = c0 + col;
              return ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                         ? xn[zoff[c] + ih * xsh + iw * xsw] : cc::zero<T>();
            },
            [&](int r, int col, int c) { return (c * rows_max + r) * pitch + col; });
      }
    }
    __syncthreads();
    // 2. the chunk's depthwise outputs for the tile (+ bias_dw, activation) into `tile`
    if (KF == 3) {
      switch (shift) {
        case 0: sep::depthwise3x3<0>(win, wd, tile, b_dw, has_b_dw, clamp, m0, cc, th, TH, TW, rows_max, pitch, first); break;
        case 1: sep::depthwise3x3<1>(win, wd, tile, b_dw, has_b_dw, clamp, m0, cc, th, TH, TW, rows_max, pitch, first); break;
        case 2: sep::depthwise3x3<2>(win, wd, tile, b_dw, has_b_dw, clamp, m0, cc, th, TH, TW, rows_max, pitch, first); break;
        default: sep::depthwise3x3<3>(win, wd, tile, b_dw, has_b_dw, clamp, m0, cc, th, TH, TW, rows_max, pitch, first); break;
      }
    } else {
      for (int item = t; item < cc * P; item += SEP_THREADS) {
        const int c = item / P, pix = item - c * P;
        const int r = pix / TW, col = pix - r * TW;
        A v = A(0);
        if (r < th && col < tw) {
          const T* wc = win + (c * rows_max + r * SH) * pitch + shift + col * SW;
          const A* f = wd + c * taps;
          for (int kh = 0; kh < KH; ++kh)
            for (int kw = 0; kw < KW; ++kw)
              v += cc::load_as<A>(wc[kh * DH * pitch + kw * DW]) * f[kh * KW + kw];
          if (has_b_dw) v += cc::load_as<A>(b_dw[m0 + c]);
          if (clamp.on) v = clamp(v);
        }
        tile[item] = v;
      }
    }
    __syncthreads();
    // 3. pointwise GEMM on the chunk (a full chunk unrolled: constant offsets, no loop overhead)
    if (pw_live) {
      const A* fw = wt + kg * KT;
      const A* tp = tile + 4 * pg;
      auto channel = [&](int c) {
        A d[4], f[KT];
        cc::load4(tp + c * P, d);
        if (KT % 2 == 0) {  // 8-byte (16 for double) aligned pairs
#pragma unroll
          for (int i = 0; i < KT; i += 2) sep::load2(fw + c * KB + i, f[i], f[(i + 1) % KT]);
        } else {
#pragma unroll
          for (int i = 0; i < KT; ++i) f[i] = fw[c * KB + i];
        }
#pragma unroll
        for (int i = 0; i < KT; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += f[i] * d[j];
      };
      if (cc == SEP_CC) {
#pragma unroll
        for (int c = 0; c < SEP_CC; ++c) channel(c);
      } else {
        for (int c = 0; c < cc; ++c) channel(c);
      }
    }
  }
  if (!pw_live) return;
  // epilogue: + bias_pw, store the live pixels
  const int r = (4 * pg) / TW, col = 4 * pg - r * TW;
  const int oh = oh0 + r, ow = ow0 + col;
  if (r >= th) return;
  const cc::index_t OHW = (cc::index_t)OH * OW;
#pragma unroll
  for (int i = 0; i < KT; ++i) {
    const int kp = kp0 + kg * KT + i;
    if (kp >= Kp) continue;
    const A b = has_b_pw ? cc::load_as<A>(b_pw[kp]) : A(0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (col + j >= tw) continue;
      const cc::index_t pix = (cc::index_t)oh * OW + ow + j;
      const cc::index_t o = channels_last ? ((cc::index_t)n * OHW + pix) * Kp + kp
                                          : ((cc::index_t)n * Kp + kp) * OHW + pix;
      y[o] = cc::store_as<T>(acc[i][j] + b);
    }
  }
}
