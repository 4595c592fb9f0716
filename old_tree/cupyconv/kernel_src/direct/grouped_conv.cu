// Grouped convolution with few channels per group (1 < groups < channels), without the GEMM view.
//
// Why not the tiled GEMM: per group the GEMM is (pixels) x Kg x (Cg * taps), and with the 4-32
// channels per group of ResNeXt-style layers its N = Kg leaves most of a 64- or 128-column tile
// idle while its K = Cg * taps is too short to amortize the tile's prologue.  Here a thread keeps
// a TK x TW register tile: TK output channels of one group at TW output pixels, so each input
// value it loads feeds TK multiply-adds and each weight it reads feeds TW.
//
// Mapping.  blockIdx.y = (group g, chunk of TK of its Kg output channels); the block's threads take
// pixels (n, od, oh, ow) in the output's order, pixel m0 + i * GC_THREADS + threadIdx.x for its
// i-th pixel (i < TW), so each of a warp's loads reads 32 consecutive pixels (one or two cache
// lines of a channels-first plane).  Every thread of a block shares the group and the output
// channels: the weights are staged once per block in shared memory, [c][tap][TK] (GC_WEIGHTS
// values, channels in chunks when the group has more), and read as broadcasts.
//
// Padding: each pixel's taps that fall inside x are a bitmask (taps <= GC_MAX_TAPS, checked by
// the host), built once; a load outside reads nothing and counts zero.  Loop order: channel, then
// tap, so the taps of one channel (9 rows of a 3x3 window around the block's pixels) are re-read
// from L1 rather than L2.
//
// Every tensor goes through element strides (x, w, y: lead, channel, d, h, w; spatial dims padded in
// front to three), so one binary serves 1-3-d, both layouts and views; the channels-first layout is
// the fast one (a warp's pixels are adjacent there; channels-last puts them C elements apart).  The
// fused epilogue (bias, residual z at y's offsets, activation) runs before the one store.
#include "common.cuh"
#include "activation.cuh"

#if !defined(GC_THREADS) || !defined(GC_WEIGHTS) || !defined(GC_MAX_TAPS)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
static_assert(GC_MAX_TAPS <= 32, "a pixel's valid taps are the bits of one unsigned");

template <typename T, int TK, int TW>
__global__ void __launch_bounds__(GC_THREADS, 2)
grouped_conv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
             const T* __restrict__ z, T* __restrict__ y, int has_bias, int has_z, int act,
             int N, int Cg, int Kg, int kchunks,
             int D, int H, int W, int OD, int OH, int OW, int KD, int KH, int KW,
             int SD, int SH, int SW, int DD, int DH, int DW, int PD, int PH, int PW,
             cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw,
             cc::index_t wsk, cc::index_t wsc, cc::index_t wsd, cc::index_t wsh, cc::index_t wsw,
             cc::index_t ysn, cc::index_t ysk, cc::index_t ysd, cc::index_t ysh, cc::index_t ysw) {
  typedef typename cc::acc_type<T>::type A;
  static_assert(TK * GC_MAX_TAPS <= GC_WEIGHTS, "a staged chunk holds at least one channel");
  // Dynamic shared memory (GC_WEIGHTS accumulator values, then GC_MAX_TAPS offsets: the host's
  // grouped.SMEM_BYTES): the staged weights and each tap's x offset from a window's origin.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* wsm = reinterpret_cast<A*>(smem_raw);
  cc::index_t* toff = reinterpret_cast<cc::index_t*>(wsm + GC_WEIGHTS);

  const int taps = KD * KH * KW;
  const int g = blockIdx.y / kchunks, kl = (blockIdx.y % kchunks) * TK;
  const int kn = min(TK, Kg - kl);  // output channels of this chunk (the last may be short)
  const int k0 = g * Kg + kl;
  const T* xg = x + (cc::index_t)g * Cg * xsc;
  const cc::index_t M = (cc::index_t)N * OD * OH * OW;

  for (int t = threadIdx.x; t < taps; t += GC_THREADS) {
    const int kw = t % KW, kh = (t / KW) % KH, kd = t / (KW * KH);
    toff[t] = kd * DD * xsd + kh * DH * xsh + kw * DW * xsw;
  }

  cc::index_t xo[TW], yo[TW];
  unsigned inside[TW];  // bit t: tap t of the pixel's window lies inside x (0 past the last pixel)
  bool live[TW];
#pragma unroll
  for (int i = 0; i < TW; ++i) {
    const cc::index_t m = (cc::index_t)blockIdx.x * (GC_THREADS * TW) + i * GC_THREADS + threadIdx.x;
    live[i] = m < M;
    xo[i] = yo[i] = 0;
    inside[i] = 0;
    if (!live[i]) continue;
    cc::index_t r = m;
    const int ow = (int)(r % OW); r /= OW;
    const int oh = (int)(r % OH); r /= OH;
    const int od = (int)(r % OD);
    const int n = (int)(r / OD);
    const int id0 = od * SD - PD, ih0 = oh * SH - PH, iw0 = ow * SW - PW;
    xo[i] = n * xsn + id0 * xsd + ih0 * xsh + iw0 * xsw;
    yo[i] = n * ysn + od * ysd + oh * ysh + ow * ysw;
    int t = 0;
    for (int kd = 0; kd < KD; ++kd)
      for (int kh = 0; kh < KH; ++kh)
        for (int kw = 0; kw < KW; ++kw, ++t) {
          const int id = id0 + kd * DD, ih = ih0 + kh * DH, iw = iw0 + kw * DW;
          if ((unsigned)id < (unsigned)D && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
            inside[i] |= 1u << t;
        }
  }

  A acc[TK][TW];
#pragma unroll
  for (int j = 0; j < TK; ++j)
#pragma unroll
    for (int i = 0; i < TW; ++i) acc[j][i] = A(0);

  const int per_chunk = GC_WEIGHTS / (TK * taps);  // channels whose weights are staged at once
  for (int c0 = 0; c0 < Cg; c0 += per_chunk) {
    const int cn = min(per_chunk, Cg - c0);
    __syncthreads();  // the previous chunk is read (and toff is written before its first use)
    for (int e = threadIdx.x; e < cn * taps * TK; e += GC_THREADS) {
      const int j = e % TK, r = e / TK, t = r % taps, c = c0 + r / taps;
      const int kw = t % KW, kh = (t / KW) % KH, kd = t / (KW * KH);
      wsm[e] = j < kn ? cc::load_as<A>(w[(k0 + j) * wsk + c * wsc + kd * wsd + kh * wsh + kw * wsw])
                      : A(0);
    }
    __syncthreads();
    for (int c = 0; c < cn; ++c) {
      const T* xc = xg + (c0 + c) * xsc;
      const A* wc = wsm + c * taps * TK;
      for (int t = 0; t < taps; ++t) {
        const cc::index_t to = toff[t];
        A a[TW], b[TK];
#pragma unroll
        for (int i = 0; i < TW; ++i)
          a[i] = (inside[i] >> t) & 1u ? cc::load_as<A>(xc[xo[i] + to]) : A(0);
#pragma unroll
        for (int j = 0; j < TK; ++j) b[j] = wc[t * TK + j];  // (TK % 4 == 0: vector reads)
#pragma unroll
        for (int j = 0; j < TK; ++j)
#pragma unroll
          for (int i = 0; i < TW; ++i) acc[j][i] = fma(b[j], a[i], acc[j][i]);
      }
    }
  }

  const cc::Epilogue<T> ep = {z, has_z, act};
#pragma unroll
  for (int j = 0; j < TK; ++j) {
    if (j >= kn) break;
    const A bj = has_bias ? cc::load_as<A>(bias[k0 + j]) : A(0);
#pragma unroll
    for (int i = 0; i < TW; ++i) {
      if (!live[i]) continue;
      const cc::index_t off = yo[i] + (k0 + j) * ysk;
      y[off] = cc::store_as<T>(ep(acc[j][i] + bj, off));
    }
  }
}
