// Depthwise convolution (groups == C, K = mult * C): forward, backward-data and backward-weight.
// These are bandwidth-bound, so the kernels are built around bytes, not FLOPs.
//
// Forward and backward-data are one "tile" kernel: backward-data of a depthwise conv is a
// transposed depthwise conv (each input pixel gathers from the outputs whose taps reach it), so
// the two differ only in how a destination coordinate maps to a source coordinate (src_coord) and
// where a tile's source window starts (tile_origin).
//
// Channels-first tile kernel: a block holds BZ destination planes; per plane a BX x (BY * vr)
// output tile, each thread owning vr consecutive rows of one column (rows of the tile are
// coalesced stores across the threads of a warp).  The tiles' source windows (with halo) are staged in shared memory
// by the whole block once per (source plane, depth tap), many loads in flight per thread
// (stage.cuh): every source element is read from global memory about once.
// Gather kernel (channels-last, and the fallback for tiles that do not fit shared memory):
// neighbouring threads own neighbouring channels, so each tap is one coalesced read.
// Backward-weight: per-block partial sums over a fixed set of planes, added in a fixed order by
// chunk_sum.cu: bitwise reproducible, no atomics.
#include "common.cuh"
#include "stage.cuh"
#include "src_coord.cuh"

// DW_THREADS, DW_ROWS (most rows per thread in the tile kernels), DW_TAPS (taps per pass of the
// backward-weight kernels) and DW_MAX_Z (most planes per block) come from KERNEL_CONSTANTS.
#if !defined(DW_THREADS) || !defined(DW_ROWS) || !defined(DW_TAPS) || !defined(DW_MAX_Z)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
// Blocks per multiprocessor the register budget is set for: the 3x3 variants are short-lived
// blocks whose loads need many resident blocks to overlap; the others keep their registers.
#define DW_MIN_BLOCKS(KF) ((KF) == 3 ? 4 : 2)
// The forward/backward-data tile kernel's budget: 3 blocks (80 registers) for float32 3x3
// measured 0.067 ms against 0.073 ms at 4 blocks; float16 is best at 4 (0.071 vs 0.079 ms)
// (benchmarks/experiments/README.md: sweep_depthwise.py, which overrides this through a module define).
#ifndef DW_TILE_MIN_BLOCKS
#define DW_TILE_MIN_BLOCKS(KF, T) ((KF) == 3 ? (sizeof(T) == 4 ? 3 : 4) : 2)
#endif

namespace dw {

// First source coordinate of the window of a destination tile that starts at o0 (may lie outside
// the source: those rows are staged as zeros).  Host and device agree on the window's extent.
template <bool TRANSPOSED>
__device__ __forceinline__ int tile_origin(int o0, int S, int Dl, int P, int K) {
  if (!TRANSPOSED) return o0 * S - P;
  const int q = o0 + P - (K - 1) * Dl;  // ceil(q / S) for either sign of q
  return q >= 0 ? (q + S - 1) / S : -((-q) / S);
}

template <bool TRANSPOSED>
__device__ __forceinline__ int tile_extent(int o0, int span, int S, int Dl, int P, int K, int first) {
  if (!TRANSPOSED) return (span - 1) * S + (K - 1) * Dl + 1;
  return (o0 + span - 1 + P) / S - first + 1;
}

// Position in the staged window of the source read by tap t of destination o (tile starts at o0,
// window at `first`), or -1.
template <bool TRANSPOSED>
__device__ __forceinline__ int tile_coord(int o, int o0, int t, int S, int Dl, int P, int first) {
  if (!TRANSPOSED) return (o - o0) * S + t * Dl;
  const int q = o + P - t * Dl - first * S;
  if (q < 0) return -1;
  const int i = q / S;
  return i * S == q ? i : -1;
}

// Sum of v over the block, in a fixed order (deterministic); valid in thread 0.  `red` holds one
// value per thread; the caller's following barrier protects its reuse.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* red) {
  const int nt = blockDim.x * blockDim.y * blockDim.z;
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  __syncthreads();
  red[tid] = v;
  __syncthreads();
  int half = 1;
  while (half * 2 < nt) half *= 2;
  for (; half > 0; half >>= 1) {
    if (tid < half && tid + half < nt) red[tid] += red[tid + half];
    __syncthreads();
  }
  return red[0];
}

}  // namespace dw

// Channels-first tile kernel.  dst: contiguous (N, Cd, OD, OH, OW).  Forward: src = x with Cd / mult
// channels, dst channel k reads source channel k / mult with filter k.  Transposed: src = dy with
// Cd * mult channels, dst channel c sums source channels c * mult + m with filters c * mult + m.
// (SD, SH, SW, ...) are the forward convolution's stride, dilation and leading pad throughout.
// KF > 0: square KF x KF taps with unit stride and dilation in H and W (the host checks): taps in
// registers, and each thread slides down its column, reading every window row once for all the
// taps and rows it feeds (KF + vr - 1 shared loads per column instead of KF * vr).
// Grid: x = ceil(planes / BZ), y = tiles_h * tiles_w.  Shared memory: BZ * rows_max * pitch.
template <typename T, int TRANSPOSED, int KF>
__global__ void __launch_bounds__(DW_THREADS, DW_TILE_MIN_BLOCKS(KF, T))
depthwise_tile(const T* __restrict__ src,
               const T* __restrict__ w,
               const T* __restrict__ bias,
               T* __restrict__ dst,
               const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int has_bias = (int)prm[0], Cd = (int)prm[1], mult = (int)prm[2], planes = (int)prm[3],
      ID = (int)prm[4], IH = (int)prm[5], IW = (int)prm[6], OD = (int)prm[7], OH = (int)prm[8],
      OW = (int)prm[9], KD = (int)prm[10], KH = (int)prm[11], KW = (int)prm[12], SD = (int)prm[13],
      SH = (int)prm[14], SW = (int)prm[15], DD = (int)prm[16], DH = (int)prm[17],
      DW = (int)prm[18], PD = (int)prm[19], PH = (int)prm[20], PW = (int)prm[21];
  const cc::index_t ssn = prm[22], ssc = prm[23], ssd = prm[24], ssh = prm[25], ssw = prm[26];
  const int vr = (int)prm[27], tiles_w = (int)prm[28], rows_max = (int)prm[29],
      pitch = (int)prm[30], vec = (int)prm[31];
  typedef typename cc::acc_type<T>::type A;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ cc::index_t zoff[DW_MAX_Z];  // each plane's source slice (NO_OFFSET: none this pass)
  const int p = blockIdx.x * blockDim.z + threadIdx.z;
  A* const windows = reinterpret_cast<A*>(smem_raw);
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int nt = blockDim.x * blockDim.y * blockDim.z;
  const bool live = p < planes;
  // Source and destination extents: the forward pass reads x (I*) and writes y (O*); the
  // transposed one reads dy (O*) and writes dx (I*).
  const int SHs = TRANSPOSED ? OH : IH, SWs = TRANSPOSED ? OW : IW, SDs = TRANSPOSED ? OD : ID;
  const int DHd = TRANSPOSED ? IH : OH, DWd = TRANSPOSED ? IW : OW, DDd = TRANSPOSED ? ID : OD;
  const int od = live ? p % DDd : 0, c = live ? (p / DDd) % Cd : 0, n = live ? p / (DDd * Cd) : 0;
  // Columns per thread: the 3x3 variant computes a 4-wide x vr-tall block per thread (its window
  // rows are read as 16-byte vectors); the others one column.
  constexpr int CW = KF == 3 ? 4 : 1;
  const int TH = blockDim.y * vr, TW = blockDim.x * CW;
  const int oh0 = (blockIdx.y / tiles_w) * TH, ow0 = (blockIdx.y % tiles_w) * TW;
  const int ow = ow0 + threadIdx.x * CW, row0 = threadIdx.y * vr;  // rows row0 + j, columns ow + i
  const int r0 = dw::tile_origin<TRANSPOSED>(oh0, SH, DH, PH, KH);
  const int c0 = dw::tile_origin<TRANSPOSED>(ow0, SW, DW, PW, KW);
  const int rows = dw::tile_extent<TRANSPOSED>(oh0, TH, SH, DH, PH, KH, r0);
  const int cols = dw::tile_extent<TRANSPOSED>(ow0, TW, SW, DW, PW, KW, c0);
  const int taps = KD * KH * KW;
  const int M = TRANSPOSED ? mult : 1;
  const A* tile = windows + threadIdx.z * rows_max * pitch;
  A acc[DW_ROWS][CW];
#pragma unroll
  for (int j = 0; j < DW_ROWS; ++j)
#pragma unroll
    for (int i = 0; i < CW; ++i) acc[j][i] = A(0);
  for (int m = 0; m < M; ++m) {
    const int sc = TRANSPOSED ? c * mult + m : c / mult;  // source channel
    const int fc = TRANSPOSED ? c * mult + m : c;         // filter
    for (int kd = 0; kd < KD; ++kd) {
      const int sd = live ? dw::src_coord<TRANSPOSED>(od, kd, SD, DD, PD, SDs) : -1;
      __syncthreads();  // the previous windows are consumed
      if (threadIdx.x == 0 && threadIdx.y == 0)
        zoff[threadIdx.z] = sd >= 0 ? n * ssn + sc * ssc + sd * ssd : cc::NO_OFFSET;
      __syncthreads();
      cc::stage_windows(windows, src, zoff, (int)blockDim.z, rows, cols, rows_max, pitch, r0, c0,
                        SHs, SWs, ssh, ssw, vec, tid, nt);
      __syncthreads();
      if (sd < 0) continue;
      const T* wt = w + (cc::index_t)fc * taps + kd * KH * KW;
      if (KF > 0) {
        // Unit stride: both mappings read window row row0 + j + kh' and column (ow - ow0) + kw'
        // for tap (kh', kw'), with the taps flipped for the transposed one.
        A wr[KF > 0 ? KF * KF : 1];
#pragma unroll
        for (int t = 0; t < KF * KF; ++t) wr[t] = cc::load_as<A>(wt[TRANSPOSED ? KF * KF - 1 - t : t]);
        const A* base = tile + row0 * pitch + (ow - ow0);
        if (CW == 4) {
          // Slide down the thread's 4 columns: each window row (6 values, two aligned 4-vectors)
          // feeds up to 3 output rows x 4 columns x 3 taps.
#pragma unroll
          for (int r = 0; r < DW_ROWS + 2; ++r) {
            A v[6];
            cc::window_row6<0>(base, r, vr + 2, pitch, v);
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) {
              const int j = r - kh;
              if (j < 0 || j >= DW_ROWS) continue;
#pragma unroll
              for (int i = 0; i < CW; ++i)
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) acc[j][i] += v[i + kw] * wr[kh * 3 + kw];
            }
          }
          continue;
        }
#pragma unroll
        for (int kw = 0; kw < KF; ++kw) {
          A colv[DW_ROWS + (KF > 0 ? KF : 1) - 1];
#pragma unroll
          for (int i = 0; i < DW_ROWS + KF - 1; ++i)
            colv[i] = i < vr + KF - 1 ? base[i * pitch + kw] : A(0);
#pragma unroll
          for (int j = 0; j < DW_ROWS; ++j)
#pragma unroll
            for (int kh = 0; kh < KF; ++kh) acc[j][0] += colv[j + kh] * wr[kh * KF + kw];
        }
        continue;
      }
      for (int kw = 0; kw < KW; ++kw) {
        const int tc = dw::tile_coord<TRANSPOSED>(ow, ow0, kw, SW, DW, PW, c0);
        if (tc < 0) continue;
        const A* col = tile + tc;
        for (int kh = 0; kh < KH; ++kh) {
          const A wv = cc::load_as<A>(wt[kh * KW + kw]);
#pragma unroll
          for (int j = 0; j < DW_ROWS; ++j) {
            if (j < vr) {
              const int tr = dw::tile_coord<TRANSPOSED>(oh0 + row0 + j, oh0, kh, SH, DH, PH, r0);
              if (tr >= 0) acc[j][0] += col[tr * pitch] * wv;
            }
          }
        }
      }
    }
  }
  if (!live || ow >= DWd) return;
  const A b = (!TRANSPOSED && has_bias) ? cc::load_as<A>(bias[c]) : A(0);
  T* out = dst + (cc::index_t)p * DHd * DWd + ow;
#pragma unroll
  for (int j = 0; j < DW_ROWS; ++j) {
    const int oh = oh0 + row0 + j;
    if (j < vr && oh < DHd) {
#pragma unroll
      for (int i = 0; i < CW; ++i)
        if (ow + i < DWd) out[(cc::index_t)oh * DWd + i] = cc::store_as<T>(acc[j][i] + b);
    }
  }
}

// Gather kernel, either layout: one thread per destination element, contiguous dst (N, Cd, OD, OH,
// OW) or (N, OD, OH, OW, Cd).  Same channel and coordinate mapping as depthwise_tile.
template <typename T, int TRANSPOSED>
__global__ void depthwise_gather(const T* __restrict__ src,
                                 const T* __restrict__ w,
                                 const T* __restrict__ bias,
                                 T* __restrict__ dst,
                                 const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int has_bias = (int)prm[0], channels_last = (int)prm[1], N = (int)prm[2], Cd = (int)prm[3],
      mult = (int)prm[4], ID = (int)prm[5], IH = (int)prm[6], IW = (int)prm[7], OD = (int)prm[8],
      OH = (int)prm[9], OW = (int)prm[10], KD = (int)prm[11], KH = (int)prm[12], KW = (int)prm[13],
      SD = (int)prm[14], SH = (int)prm[15], SW = (int)prm[16], DD = (int)prm[17],
      DH = (int)prm[18], DW = (int)prm[19], PD = (int)prm[20], PH = (int)prm[21], PW = (int)prm[22];
  const cc::index_t ssn = prm[23], ssc = prm[24], ssd = prm[25], ssh = prm[26], ssw = prm[27];
  typedef typename cc::acc_type<T>::type A;
  const int SDs = TRANSPOSED ? OD : ID, SHs = TRANSPOSED ? OH : IH, SWs = TRANSPOSED ? OW : IW;
  const int DDd = TRANSPOSED ? ID : OD, DHd = TRANSPOSED ? IH : OH, DWd = TRANSPOSED ? IW : OW;
  const cc::index_t total = (cc::index_t)N * Cd * DDd * DHd * DWd;
  const bool narrow = total <= 0xffffffffLL;
  const int taps = KD * KH * KW, M = TRANSPOSED ? mult : 1;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    int n, c, od, oh, ow;
    cc::split_activation(idx, Cd, DDd, DHd, DWd, channels_last != 0, narrow, n, c, od, oh, ow);
    A acc = (!TRANSPOSED && has_bias) ? cc::load_as<A>(bias[c]) : A(0);
    for (int m = 0; m < M; ++m) {
      const int sc = TRANSPOSED ? c * mult + m : c / mult, fc = TRANSPOSED ? c * mult + m : c;
      const T* plane = src + n * ssn + sc * ssc;
      const T* wk = w + (cc::index_t)fc * taps;
      for (int kd = 0; kd < KD; ++kd) {
        const int sd = dw::src_coord<TRANSPOSED>(od, kd, SD, DD, PD, SDs);
        if (sd < 0) continue;
        for (int kh = 0; kh < KH; ++kh) {
          const int sh = dw::src_coord<TRANSPOSED>(oh, kh, SH, DH, PH, SHs);
          if (sh < 0) continue;
          for (int kw = 0; kw < KW; ++kw) {
            const int sw = dw::src_coord<TRANSPOSED>(ow, kw, SW, DW, PW, SWs);
            if (sw < 0) continue;
            acc += cc::load_as<A>(plane[sd * ssd + sh * ssh + sw * ssw]) *
                   cc::load_as<A>(wk[(kd * KH + kh) * KW + kw]);
          }
        }
      }
    }
    dst[idx] = cc::store_as<T>(acc);
  }
}

// Backward-weight, channels-first tiles: block (k, chunk) sums dy * x over the planes (n, od) of
// its chunk, every spatial tile, for one pass of taps at a time (one depth tap, whole kernel rows;
// KF > 0: all KF x KF taps of a unit-stride, unit-dilation kernel, each window row read once per
// column as in depthwise_tile); the block total goes to partial[(chunk * K + k) * taps + tap] (the
// split-K workspace layout).  x is read through strides; dy is contiguous (N, K, OD, OH, OW).
// Grid: (K, chunks).
template <typename T, int KF>
__global__ void __launch_bounds__(DW_THREADS, DW_MIN_BLOCKS(KF))
depthwise_wgrad_tile(const T* __restrict__ x,
                     const T* __restrict__ dy,
                     typename cc::acc_type<T>::type* __restrict__ partial,
                     const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int K = (int)prm[0], mult = (int)prm[1], planes = (int)prm[2],
      planes_per_chunk = (int)prm[3], ID = (int)prm[4], IH = (int)prm[5], IW = (int)prm[6],
      OD = (int)prm[7], OH = (int)prm[8], OW = (int)prm[9], KD = (int)prm[10], KH = (int)prm[11],
      KW = (int)prm[12], SD = (int)prm[13], SH = (int)prm[14], SW = (int)prm[15],
      DD = (int)prm[16], DH = (int)prm[17], DW = (int)prm[18], PD = (int)prm[19],
      PH = (int)prm[20], PW = (int)prm[21];
  const cc::index_t xsn = prm[22], xsc = prm[23], xsd = prm[24], xsh = prm[25], xsw = prm[26];
  const int vr = (int)prm[27], tiles_w = (int)prm[28], tiles = (int)prm[29],
      rows_max = (int)prm[30], pitch = (int)prm[31], vec = (int)prm[32];
  typedef typename cc::acc_type<T>::type A;
  constexpr int NA = KF > 0 ? KF * KF : DW_TAPS;  // accumulators: taps of one pass
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ cc::index_t zoff[DW_MAX_Z];  // each plane's input slice (NO_OFFSET: none this pass)
  const int k = blockIdx.x, chunk = blockIdx.y;
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int nt = blockDim.x * blockDim.y * blockDim.z;
  A* red = reinterpret_cast<A*>(smem_raw);
  A* const windows = red + ((nt + 3) & ~3);  // 4-aligned: the 3x3 variant reads 4-vectors
  const A* tile = windows + threadIdx.z * rows_max * pitch;
  const int q_begin = chunk * planes_per_chunk;
  const int q_end = min(planes, q_begin + planes_per_chunk);
  constexpr int CW = KF == 3 ? 4 : 1;  // columns per thread, as in depthwise_tile
  const int TH = blockDim.y * vr, TW = blockDim.x * CW, taps = KD * KH * KW, row0 = threadIdx.y * vr;
  const int rows_per_pass = KF > 0 ? KF : max(1, DW_TAPS / KW);
  const T* xk = x + (cc::index_t)(k / mult) * xsc;
  for (int kd = 0; kd < KD; ++kd) {
    for (int kh0 = 0; kh0 < KH; kh0 += rows_per_pass) {
      const int nkh = min(rows_per_pass, KH - kh0), ntp = nkh * KW;
      int off[KF > 0 ? 1 : DW_TAPS];  // window offset of each tap of this pass (generic path)
#pragma unroll
      for (int t = 0; t < (KF > 0 ? 1 : DW_TAPS); ++t)
        off[t] = t < ntp ? (t / KW) * DH * pitch + (t % KW) * DW : 0;
      A acc[NA];
#pragma unroll
      for (int t = 0; t < NA; ++t) acc[t] = A(0);
      for (int qb = q_begin; qb < q_end; qb += blockDim.z) {
        const int q = qb + threadIdx.z;
        const bool live = q < q_end;
        const int od = live ? q % OD : 0, n = live ? q / OD : 0;
        const int id = live ? dw::src_coord<false>(od, kd, SD, DD, PD, ID) : -1;
        const T* dyp = dy + ((cc::index_t)n * K + k) * OD * OH * OW + (cc::index_t)od * OH * OW;
        for (int tile_i = 0; tile_i < tiles; ++tile_i) {
          const int oh0 = (tile_i / tiles_w) * TH, ow0 = (tile_i % tiles_w) * TW;
          const int r0 = oh0 * SH - PH + kh0 * DH, c0 = ow0 * SW - PW;
          const int rows = (TH - 1) * SH + (nkh - 1) * DH + 1;
          const int cols = (TW - 1) * SW + (KW - 1) * DW + 1;
          __syncthreads();
          if (threadIdx.x == 0 && threadIdx.y == 0)
            zoff[threadIdx.z] = id >= 0 ? n * xsn + id * xsd : cc::NO_OFFSET;
          __syncthreads();
          cc::stage_windows(windows, xk, zoff, (int)blockDim.z, rows, cols, rows_max, pitch, r0,
                            c0, IH, IW, xsh, xsw, vec, tid, nt);
          __syncthreads();
          const int ow = ow0 + threadIdx.x * CW;
          if (id < 0) continue;
          A g[DW_ROWS][CW];
#pragma unroll
          for (int j = 0; j < DW_ROWS; ++j) {
            const int oh = oh0 + row0 + j;
#pragma unroll
            for (int i = 0; i < CW; ++i)
              g[j][i] = (j < vr && oh < OH && ow + i < OW)
                            ? cc::load_as<A>(dyp[(cc::index_t)oh * OW + ow + i]) : A(0);
          }
          if (CW == 4) {
            // As in depthwise_tile: each window row (two aligned 4-vectors) meets up to 3 rows of
            // the thread's 4 x vr block of dy, for all 9 taps.
            const A* base = tile + row0 * pitch + threadIdx.x * CW;
#pragma unroll
            for (int r = 0; r < DW_ROWS + 2; ++r) {
              A v[6];
              cc::window_row6<0>(base, r, vr + 2, pitch, v);
#pragma unroll
              for (int kh = 0; kh < 3; ++kh) {
                const int j = r - kh;
                if (j < 0 || j >= DW_ROWS) continue;
#pragma unroll
                for (int i = 0; i < CW; ++i)
#pragma unroll
                  for (int kw = 0; kw < 3; ++kw) acc[kh * 3 + kw] += g[j][i] * v[i + kw];
              }
            }
            continue;
          }
          if (KF > 0) {
            const A* base = tile + row0 * pitch + threadIdx.x;
#pragma unroll
            for (int kw = 0; kw < (KF > 0 ? KF : 1); ++kw) {
              A colv[DW_ROWS + (KF > 0 ? KF : 1) - 1];
#pragma unroll
              for (int i = 0; i < DW_ROWS + KF - 1; ++i)
                colv[i] = i < vr + KF - 1 ? base[i * pitch + kw] : A(0);
#pragma unroll
              for (int j = 0; j < DW_ROWS; ++j)
#pragma unroll
                for (int kh = 0; kh < KF; ++kh) acc[kh * KF + kw] += g[j][0] * colv[j + kh];
            }
            continue;
          }
          if (ow >= OW) continue;
#pragma unroll
          for (int j = 0; j < DW_ROWS; ++j) {
            if (j < vr) {
              const A* win = tile + (row0 + j) * SH * pitch + threadIdx.x * SW;
#pragma unroll
              for (int t = 0; t < (KF > 0 ? 1 : DW_TAPS); ++t)
                if (t < ntp) acc[t] += g[j][0] * win[off[t]];
            }
          }
        }
      }
#pragma unroll
      for (int t = 0; t < NA; ++t) {  // constant indices keep acc in registers
        if (t >= ntp) break;
        const A s = dw::block_sum(acc[t], red);
        if (tid == 0) partial[((cc::index_t)chunk * K + k) * taps + (kd * KH + kh0) * KW + t] = s;
      }
    }
  }
}

// Backward-weight, gather form (channels-last, or windows too large for shared memory): thread
// (chunk, k) sums dy * x over the pixels of its chunk, DW_TAPS taps per pass; neighbouring threads
// own neighbouring channels (coalesced for channels-last).  dy and x are read through strides.
template <typename T>
__global__ void depthwise_wgrad_gather(const T* __restrict__ x,
                                       const T* __restrict__ dy,
                                       typename cc::acc_type<T>::type* __restrict__ partial,
                                       const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int chunks = (int)prm[0], pixels_per_chunk = (int)prm[1], N = (int)prm[2], K = (int)prm[3],
      mult = (int)prm[4], ID = (int)prm[5], IH = (int)prm[6], IW = (int)prm[7], OD = (int)prm[8],
      OH = (int)prm[9], OW = (int)prm[10], KD = (int)prm[11], KH = (int)prm[12], KW = (int)prm[13],
      SD = (int)prm[14], SH = (int)prm[15], SW = (int)prm[16], DD = (int)prm[17],
      DH = (int)prm[18], DW = (int)prm[19], PD = (int)prm[20], PH = (int)prm[21], PW = (int)prm[22];
  const cc::index_t xsn = prm[23], xsc = prm[24], xsd = prm[25], xsh = prm[26], xsw = prm[27],
      gsn = prm[28], gsc = prm[29], gsd = prm[30], gsh = prm[31], gsw = prm[32];
  typedef typename cc::acc_type<T>::type A;
  const cc::index_t pixels = (cc::index_t)N * OD * OH * OW;
  const int taps = KD * KH * KW;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x;
       idx < (cc::index_t)chunks * K; idx += (cc::index_t)blockDim.x * gridDim.x) {
    const int k = (int)(idx % K), chunk = (int)(idx / K);
    const cc::index_t p_begin = (cc::index_t)chunk * pixels_per_chunk;
    const cc::index_t p_end = min(pixels, p_begin + pixels_per_chunk);
    const T* xk = x + (cc::index_t)(k / mult) * xsc;
    const T* gk = dy + (cc::index_t)k * gsc;
    for (int t0 = 0; t0 < taps; t0 += DW_TAPS) {
      int tkd[DW_TAPS], tkh[DW_TAPS], tkw[DW_TAPS];
      A acc[DW_TAPS];
#pragma unroll
      for (int t = 0; t < DW_TAPS; ++t) {
        const int tap = min(t0 + t, taps - 1);
        tkw[t] = tap % KW; tkh[t] = (tap / KW) % KH; tkd[t] = tap / (KW * KH);
        acc[t] = A(0);
      }
      for (cc::index_t pix = p_begin; pix < p_end; ++pix) {
        cc::index_t r = pix;
        const int ow = cc::divmod(r, OW, false), oh = cc::divmod(r, OH, false);
        const int od = cc::divmod(r, OD, false), n = (int)r;
        const A g = cc::load_as<A>(gk[n * gsn + od * gsd + oh * gsh + ow * gsw]);
        const T* xn = xk + n * xsn;
#pragma unroll
        for (int t = 0; t < DW_TAPS; ++t) {
          if (t0 + t >= taps) continue;
          const int id = dw::src_coord<false>(od, tkd[t], SD, DD, PD, ID);
          const int ih = dw::src_coord<false>(oh, tkh[t], SH, DH, PH, IH);
          const int iw = dw::src_coord<false>(ow, tkw[t], SW, DW, PW, IW);
          if ((id | ih | iw) >= 0) acc[t] += g * cc::load_as<A>(xn[id * xsd + ih * xsh + iw * xsw]);
        }
      }
#pragma unroll
      for (int t = 0; t < DW_TAPS; ++t)
        if (t0 + t < taps) partial[((cc::index_t)chunk * K + k) * taps + t0 + t] = acc[t];
    }
  }
}
