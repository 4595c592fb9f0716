// Depthwise convolution, channels-first, on bands of whole rows staged in shared memory: forward
// (stride S = 1 or 2 in H and W) and backward-data (transposed, unit or stride 2, no channel
// multiplier), filters of at most KF x KF taps (KF = 3, 5, 7), unit dilation; float16 and bfloat16
// computed in float32, float32, float64.
//
// A block owns a band of BR consecutive destination rows, full width, of P consecutive
// destination planes (either one plane, BR < its height, or P whole planes).  Since planes and
// rows are contiguous, both what the band reads and what it writes are contiguous runs of
// memory, so the block moves them with flat, coalesced loads and stores whatever the width:
//   1. stage: the block's source rows go to shared memory as a zero-padded plane U (pitch cells
//      per row), read as 16-byte vectors, each element's cell found by two magic-number
//      divisions of its flat index;
//   2. compute: an item is RX destination columns of one destination row; it reads the staged
//      rows its taps reach, a window of cells per row, multiplies them by the taps with no bounds
//      tests (the padding is in U) and writes the RX sums to an output buffer in shared memory;
//   3. write: the buffer goes out as one flat run.
// The plane row walk (depthwise_plane.cu) loads rows as aligned 16-byte quads straight from
// global memory; on planes narrower than a few quads (the 7^2 and 14^2 layers of MobileNets) most
// of its lanes idle and rows 28 or 56 bytes wide are not aligned.  Here narrow planes cost no
// idle lanes, and the transposed stride-2 pass needs no channels-last detour.
//
// U coordinates: source (row, column) (sr, sc) sits in U[sr - sr0][sc + coff], sr0 the source row
// of the block's first staged row.
//   UP == 1, forward (coff = PW) or unit-stride backward-data (the forward correlation of dy
//   with the filter rotated by 180 degrees, `flip`; offsets K - 1 - P): destination (oy, ox)
//   reads U[oy S + kh][ox S + kw] (relative to its band) with tap (kh, kw), compute stride
//   CS = S.
//   UP == 2, backward-data at stride 2 by phases: dx (oy, ox) = sum of dy[(oy - offH + kh) / 2]
//   [(ox - offW + kw) / 2] times the rotated tap (kh, kw), over the taps where both divisions are
//   exact (offH = KH - 1 - PH): a quarter of the taps.  An item is RX columns of a pair of rows
//   (oy, oy + 1) with oy - offH even (the pairs start `rlead` rows before the band, whose first
//   row is even): row oy takes the taps kh = 0, 2, ..., row oy + 1 the taps kh = 1, 3, ..., each
//   from consecutive staged rows.  Columns: an item starts at an even distance from offW (the
//   host shifts the items `lead` columns left).  So which (row, column, tap) triples meet is known
//   at compile time; no phase is computed from a coordinate (HIPRTC's LLVM for gfx90a, gfx908
//   and gfx1030, ROCm 5.7, failed on the 1-bit multiplies such a parity turned into).
#include "common.cuh"

#if !defined(DWB_RX) || !defined(DWB_THREADS) || !defined(DWB_MIN_BLOCKS)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif

namespace dwb {

// n / d for 0 <= n < 2^31 with (mul, shr) from cupyconv._core.copy.magic_divisor (mul 0: d == 1).
__device__ __forceinline__ int quotient(int n, unsigned mul, int shr) {
  return mul ? (int)(__umulhi((unsigned)n, mul) >> shr) : n;
}

// Source loads a thread issues before storing any into shared memory: all of a typical block's
// share in flight at once (a batch of scalar loads waited out a DRAM latency per batch; measured
// at 23 % of the copy rate on 7^2 planes with four batches of four).
constexpr int BATCH = 4;

// Elements of T in one 16-byte load.
template <typename T> struct per16 { static constexpr int value = 16 / (int)sizeof(T); };

}  // namespace dwb

// Grid: x = ceil(planes / P) * bands (band index fastest).  Block: DWB_THREADS threads.  Shared
// memory (the host mirrors it): U, P x srows x pitch; the output buffer, P x BR rows of opitch;
// taps, P x KF x KF; biases, P (all in the compute type).  (CS, UP): (1, 1), (2, 1) or (1, 2).
template <typename T, int KF, int CS, int UP>
__global__ void __launch_bounds__(DWB_THREADS, DWB_MIN_BLOCKS)
depthwise_bands(const T* __restrict__ src, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ dst, const cc::index_t* __restrict__ prm) {
  typedef typename cc::acc_type<T>::type A;
  static_assert(UP == 1 || (UP == 2 && CS == 1 && DWB_RX % 2 == 0), "phases need even items");
  constexpr int RX = DWB_RX, KK = KF * KF;
  // staged cells a window row holds: RX * CS - CS + KF, or by phases (RX + KF - 2) / 2 + 1
  constexpr int NJ = UP == 1 ? (RX - 1) * CS + KF : (RX + KF - 2) / 2 + 1;
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int has_bias = (int)prm[0], K = (int)prm[1], mult = (int)prm[2], planes = (int)prm[3],
      SH = (int)prm[4], SW = (int)prm[5], DH = (int)prm[6], DW = (int)prm[7], KH = (int)prm[8],
      KW = (int)prm[9], offH = (int)prm[10], coff = (int)prm[11], lead = (int)prm[12],
      P = (int)prm[13], BR = (int)prm[14], bands = (int)prm[15], pitch = (int)prm[16],
      srows = (int)prm[17], segs = (int)prm[18], opitch = (int)prm[19], flip = (int)prm[20],
      vec_in = (int)prm[21];
  // (mul, shr) of the divisions by the source plane's elements and width, the item rows per
  // segment (irows below), the items per plane and the destination width (magic numbers:
  // dwb::quotient)
  const unsigned mul_plane = (unsigned)prm[22], mul_sw = (unsigned)prm[24],
      mul_br = (unsigned)prm[26], mul_item = (unsigned)prm[28], mul_dw = (unsigned)prm[30];
  const int shr_plane = (int)prm[23], shr_sw = (int)prm[25], shr_br = (int)prm[27],
      shr_item = (int)prm[29], shr_dw = (int)prm[31];
  // Item rows per segment (BR; by phases, pairs of rows) and the pairs' lead (offH's parity).
  const int irows = (int)prm[32], rlead = (int)prm[33];

  const int band = blockIdx.x % bands, group = blockIdx.x / bands;
  const int q0 = group * P, np = min(P, planes - q0);      // destination planes [q0, q0 + np)
  const int row0 = band * BR, nrows = min(BR, DH - row0);  // destination rows of the band
  const int sp0 = q0 / mult, nsp = (q0 + np - 1) / mult - sp0 + 1;  // source planes
  const int plane_cells = srows * pitch;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* const U = reinterpret_cast<A*>(smem_raw);
  A* const obuf = U + P * plane_cells;
  A* const taps = obuf + P * BR * opitch;
  A* const bvals = taps + P * KK;
  const int tid = threadIdx.x, nt = blockDim.x;

  // Taps (zero past KH x KW, rotated with flip) and biases of the block's planes.
  for (int i = tid; i < np * KK; i += nt) {
    const int p = i / KK, t = i - p * KK, kh = t / KF, kw = t - kh * KF;
    const int k = (q0 + p) % K;
    const int wr = flip ? KH - 1 - kh : kh, wc = flip ? KW - 1 - kw : kw;
    taps[i] = (kh < KH && kw < KW) ? cc::load_as<A>(w[(cc::index_t)k * KH * KW + wr * KW + wc])
                                   : A(0);
  }
  for (int p = tid; p < np; p += nt)
    bvals[p] = has_bias ? cc::load_as<A>(bias[(q0 + p) % K]) : A(0);

  // 1. Stage.  U starts as zeros (the padding); then the source rows the band reads, one
  // contiguous run of src from plane sp0 row r_lo to plane sp0 + nsp - 1 row r_hi - 1, are read
  // in 16-byte vectors where src is 16-byte aligned (`vec_in`; the run's first and last vectors
  // overhang it) and each element goes to its cell.
  const int plane_elems = SH * SW;
  const int sr0 = UP == 1 ? row0 * CS - offH : (row0 - offH) >> 1;  // (an arithmetic shift: floor)
  const int r_lo = max(0, sr0), r_hi = min(SH, sr0 + srows);
  {
    const int words = (nsp * plane_cells * (int)sizeof(A) + 15) / 16;
    for (int i = tid; i < words; i += nt) reinterpret_cast<uint4*>(U)[i] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  const T* const sbase = src + (cc::index_t)sp0 * plane_elems;
  const int e_begin = r_lo * SW, e_end = (nsp - 1) * plane_elems + r_hi * SW;
  // Element e (from sbase) to its cell of U, or -1 outside the band's rows and columns.
  auto cell = [&](int e) -> int {
    const int sp = dwb::quotient(e, mul_plane, shr_plane), r = e - sp * plane_elems;
    const int sr = dwb::quotient(r, mul_sw, shr_sw), sc = r - sr * SW;
    const int u = sr - sr0, v = sc + coff;
    const bool in = e >= e_begin && e < e_end && sr >= r_lo && sr < r_hi && (unsigned)u < (unsigned)srows
                    && (unsigned)v < (unsigned)pitch;
    return in ? sp * plane_cells + u * pitch + v : -1;
  };
  if (r_lo < r_hi) {
    if (vec_in) {
      constexpr int V = dwb::per16<T>::value;
      const int skew = (int)(((size_t)sbase / sizeof(T)) % V);  // sbase's element in its vector
      const uint4* const vbase = reinterpret_cast<const uint4*>(sbase - skew);
      const int v_begin = (e_begin + skew) / V, v_end = (e_end + skew + V - 1) / V;
      for (int v0 = v_begin + tid; v0 < v_end; v0 += dwb::BATCH * nt) {
        uint4 raw[dwb::BATCH];
#pragma unroll
        for (int b = 0; b < dwb::BATCH; ++b)
          if (v0 + b * nt < v_end) raw[b] = vbase[v0 + b * nt];
#pragma unroll
        for (int b = 0; b < dwb::BATCH; ++b) {
          const T* const el = reinterpret_cast<const T*>(&raw[b]);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const int c = v0 + b * nt < v_end ? cell((v0 + b * nt) * V + k - skew) : -1;
            if (c >= 0) U[c] = cc::load_as<A>(el[k]);
          }
        }
      }
    } else {
      for (int e0 = e_begin + tid; e0 < e_end; e0 += dwb::BATCH * nt) {
        T raw[dwb::BATCH];
#pragma unroll
        for (int b = 0; b < dwb::BATCH; ++b)
          if (e0 + b * nt < e_end) raw[b] = sbase[e0 + b * nt];
#pragma unroll
        for (int b = 0; b < dwb::BATCH; ++b) {
          const int c = e0 + b * nt < e_end ? cell(e0 + b * nt) : -1;
          if (c >= 0) U[c] = cc::load_as<A>(raw[b]);
        }
      }
    }
  }
  __syncthreads();

  // 2. Compute: item = (plane, segment, row or row pair), rows fastest, so a warp's lanes read
  // rows CS * pitch (by phases: pitch) cells apart (pitch odd: distinct banks).
  const int items_pp = irows * segs;
  for (int it = tid; it < np * items_pp; it += nt) {
    const int p = dwb::quotient(it, mul_item, shr_item), r = it - p * items_pp;
    const int sg = dwb::quotient(r, mul_br, shr_br), ol = r - sg * irows;
    if (UP == 1 && ol >= nrows) continue;
    const int spl = mult == 1 ? p : (q0 + p) / mult - sp0;
    const A* const uplane = U + spl * plane_cells;
    const A* const tp = taps + p * KK;
    if (UP == 1) {
      A acc[RX];
#pragma unroll
      for (int x = 0; x < RX; ++x) acc[x] = bvals[p];
      const A* const urow = uplane + ol * CS * pitch + sg * RX * CS;
#pragma unroll
      for (int kh = 0; kh < KF; ++kh) {
        A win[NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j) win[j] = urow[kh * pitch + j];
#pragma unroll
        for (int kw = 0; kw < KF; ++kw) {
          const A t = tp[kh * KF + kw];
#pragma unroll
          for (int x = 0; x < RX; ++x) acc[x] += win[x * CS + kw] * t;
        }
      }
      A* const orow = obuf + (p * BR + ol) * opitch;
#pragma unroll
      for (int x = 0; x < RX; ++x)
        if (sg * RX + x < DW) orow[sg * RX + x] = acc[x];
    } else {
      // Pair ol: band rows 2 ol - rlead (phase 0) and 2 ol - rlead + 1 (phase 1).  Phase ph takes
      // the taps kh = ph + 2 i from staged row ol + ph + i; column x with tap kw (x + kw even)
      // reads cell (x + kw) / 2 of the item's window.
      const A* const ubase = uplane + ol * pitch + sg * (RX / 2);
#pragma unroll
      for (int ph = 0; ph < 2; ++ph) {
        const int oy = 2 * ol - rlead + ph;
        if (oy < 0 || oy >= nrows) continue;
        A acc[RX];
#pragma unroll
        for (int x = 0; x < RX; ++x) acc[x] = bvals[p];
#pragma unroll
        for (int i = 0; ph + 2 * i < KF; ++i) {
          A win[NJ];
#pragma unroll
          for (int j = 0; j < NJ; ++j) win[j] = ubase[(ph + i) * pitch + j];
#pragma unroll
          for (int kw = 0; kw < KF; ++kw) {
            const A t = tp[(ph + 2 * i) * KF + kw];
#pragma unroll
            for (int x = 0; x < RX; ++x)
              if ((x + kw) % 2 == 0) acc[x] += win[(x + kw) / 2] * t;
          }
        }
        // (the items start `lead` columns before column 0)
        A* const orow = obuf + (p * BR + oy) * opitch;
#pragma unroll
        for (int x = 0; x < RX; ++x) {
          const int ox = sg * RX - lead + x;
          if (ox >= 0 && ox < DW) orow[ox] = acc[x];
        }
      }
    }
  }
  __syncthreads();

  // 3. Write: the band's rows of the block's planes are one contiguous run of dst (np == 1 or
  // BR == DH).
  T* const out = dst + ((cc::index_t)q0 * DH + row0) * DW;
  const int total = (np - 1) * BR * DW + nrows * DW;
  for (int e = tid; e < total; e += nt) {
    const int rr = dwb::quotient(e, mul_dw, shr_dw), cidx = e - rr * DW;
    out[e] = cc::store_as<T>(obuf[rr * opitch + cidx]);
  }
}
