// 2-D correlation of a stack of planes (the signal API's image filter), float32 and float64:
//
//   y[p, oh, ow] = sum_{kh < KH, kw < KW} X(p, oh - PH + kh, ow - PW + kw) * g[p, kh, kw]
//
// X reads the input through the boundary mode.  This is filter_direct's contract restricted to one
// depth slice and filters of at most KWB columns (the host routes everything else there), built
// for bytes and issue slots: small image filters are bandwidth-bound, and a block-wide staged
// window costs barriers and index arithmetic that the memory system then waits on (filter_direct:
// SM 78 %, DRAM 31 %; a staged, double-buffered version of this kernel: DRAM 35 %).
//
// Here no window is staged.  A warp owns a strip of 128 output columns and RW rows; lane l owns
// columns 4l .. 4l+3 and walks down the input rows that feed them, reading the 4 + KW - 1 input
// columns it needs of a row as 1 + KWB/4 aligned 16-byte loads (neighbouring lanes' reads
// overlap, and so do row chunks: L1 serves both).  Tile columns start at 128 t - d, where d < 4
// makes every strip's first input column ow0 - PW a multiple of 4, so the quads are aligned
// whatever the padding.
// Each input row feeds the RY output rows of a chunk it overlaps (acc[i] += row (x) taps[r - i]);
// the next row's loads are issued before the current row's multiply-adds (two rows ahead spilled
// and ran slower: benchmarks/NOTES.md).
//
// Boundary modes are applied per loaded row (rows) and, only in strips that overhang the image or
// when rows are not 16-byte aligned (`vec_in` false), per loaded element (columns): never per tap.
// Template: KWB, the filter-width bucket; KF, a square filter size fixed at compile time (0: any).
// Taps: KH x KWB in shared memory, read as broadcasts (`flip`: g reversed on both axes).
// Stores: 4-element vectors when output quads are aligned (`vec_out`: d == 0, OW % 4 == 0,
// aligned base); otherwise through a per-warp shared buffer as coalesced rows.  Warps never wait
// for each other after the taps are staged.
#include "common.cuh"
#include "boundary.cuh"
#include "stage.cuh"

// Resident blocks per SM the register budget is cut for: the loads in flight scale with resident
// warps.  float: 4 (64 registers) up to 8 filter columns, 3 for 16 (it spills at 64); double: 2
// (the 2026-11-23 sweep in benchmarks/NOTES.md).  A module define may override it.
#ifndef FP_MIN_BLOCKS
#define FP_MIN_BLOCKS(T, KWB) (sizeof(T) > 4 ? 2 : (KWB) <= 8 ? 4 : 3)
#endif

namespace fp {

const int WARPS = 8;
const int TW = 128;   // output columns per strip: 4 per lane
const int CHUNKS = 2;  // row chunks per warp: RW = CHUNKS * RY output rows
// Output rows per chunk: 4 x 4 float accumulators, 2 x 4 doubles.
template <typename T> struct rows_per_thread { static const int value = sizeof(T) <= 4 ? 4 : 2; };

// A lane's window of one input row: columns 4l .. 4l + KWB + 3 of the strip (the first 4 + KW - 1
// are used).  Lane l's quads overlap lane l+1's; the duplicate reads hit L1.
template <typename T, int KWB> struct Window {
  T v[KWB / 4 + 1][4];
  __device__ __forceinline__ T operator[](int i) const { return v[i / 4][i % 4]; }
};

// Load input row `ih` (already mapped through the boundary mode; -1: a fill row).  `fast`: the
// strip's quads lie inside the row and are 16-byte aligned, so no column needs the boundary mode.
template <typename T, int KWB>
__device__ __forceinline__ void load_row(Window<T, KWB>& w, const T* __restrict__ xp, int ih,
                                         int c0, int W, int KW, int boundary, bool fast, T fill) {
  const T* row = xp + (cc::index_t)ih * W;
  if (ih >= 0 && fast) {
#pragma unroll
    for (int q = 0; q <= KWB / 4; ++q) cc::load4(row + c0 + 4 * q, w.v[q]);
  } else {
#pragma unroll
    for (int e = 0; e < KWB + 4; ++e) {
      if (e < KW + 3) {  // uniform
        const int a = ih < 0 ? -1 : cc::boundary_index(c0 + e, W, boundary);
        w.v[e / 4][e % 4] = a < 0 ? fill : row[a];
      }
    }
  }
}

}  // namespace fp

template <typename T, int KWB, int KF>
__global__ void __launch_bounds__(256, FP_MIN_BLOCKS(T, KWB))
filter_plane(const T* __restrict__ x, const T* __restrict__ g, const T fill, T* __restrict__ y,
             int planes, int OH, int OW, int H, int W, int KH_, int KW_, int PH, int PW,
             int boundary, cc::index_t gsb, int flip, int tiles_w, int d, int vec_in, int vec_out) {
  const int RY = fp::rows_per_thread<T>::value, RW = fp::CHUNKS * RY, TW = fp::TW;
  // KF > 0: a KF x KF filter fixed at compile time (the host passes the same sizes), so the taps'
  // column branches resolve: the common 3/5/7 squares.  (Unrolling the row loop as well spilled:
  // the compiler hoists every row's loads.)
  const int KH = KF > 0 ? KF : KH_, KW = KF > 0 ? KF : KW_;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const taps = reinterpret_cast<T*>(smem_raw);  // KH x KWB
  T* const obuf = taps + KH * KWB;                  // WARPS x RY x TW, only without vec_out
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int strip = blockIdx.x % tiles_w, band = blockIdx.x / tiles_w;
  const int ow0 = strip * TW - d, iw0 = ow0 - PW;
  const int oh_warp = (band * fp::WARPS + warp) * RW;
  // Every lane's window quads inside the row, rows 16-byte aligned.
  const bool fast = vec_in && iw0 >= 0 && iw0 + TW + KWB <= W;

  for (int plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const T* xp = x + (cc::index_t)plane * H * W;
    const T* gp = g + plane * gsb;
    __syncthreads();  // the previous plane's taps are consumed
    for (int i = tid; i < KH * KWB; i += 256) {
      const int r = i / KWB, c = i - r * KWB;
      // (flip: convolution's reversed filter, read in place instead of copied by the host)
      taps[i] = c < KW ? gp[flip ? (KH - 1 - r) * KW + KW - 1 - c : r * KW + c] : cc::zero<T>();
    }
    __syncthreads();
    T* yp = y + (cc::index_t)plane * OH * OW;

    for (int chunk = 0; chunk < fp::CHUNKS; ++chunk) {
      const int oh0 = oh_warp + chunk * RY;
      if (oh0 >= OH) break;  // warp-uniform
      T acc[RY][4];
#pragma unroll
      for (int i = 0; i < RY; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = cc::zero<T>();

      const int nrows = RY + KH - 1, c0 = iw0 + 4 * lane;
      fp::Window<T, KWB> cur, nxt;
      fp::load_row<T, KWB>(cur, xp, cc::boundary_index(oh0 - PH, H, boundary), c0, W, KW,
                           boundary, fast, fill);
#pragma unroll 1
      for (int r = 0; r < nrows; ++r) {
        if (r + 1 < nrows)  // in flight during this row's multiply-adds
          fp::load_row<T, KWB>(nxt, xp, cc::boundary_index(oh0 - PH + r + 1, H, boundary), c0, W,
                               KW, boundary, fast, fill);
#pragma unroll
        for (int i = 0; i < RY; ++i) {
          const int kh = r - i;
          if (kh >= 0 && kh < KH) {  // uniform: input row r feeds output row i through tap row kh
            T f[KWB / 4][4];
#pragma unroll
            for (int q = 0; q < KWB / 4; ++q) cc::load4(taps + kh * KWB + 4 * q, f[q]);
#pragma unroll
            for (int kw = 0; kw < KWB; ++kw) {
              if (kw < KW) {
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += cur[j + kw] * f[kw / 4][kw % 4];
              }
            }
          }
        }
        if (r + 1 < nrows) cur = nxt;
      }

      if (vec_out) {  // ow0 and OW multiples of 4: a quad is wholly inside or outside the row
#pragma unroll
        for (int i = 0; i < RY; ++i)
          if (oh0 + i < OH && ow0 + 4 * lane < OW)
            cc::stg4(yp + (cc::index_t)(oh0 + i) * OW + ow0 + 4 * lane, acc[i]);
      } else {
        T* ob = obuf + warp * RY * TW;
#pragma unroll
        for (int i = 0; i < RY; ++i) cc::stg4(ob + i * TW + 4 * lane, acc[i]);
        CC_SYNCWARP();
#pragma unroll
        for (int i = 0; i < RY; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int c = ow0 + lane + 32 * j;
            if (oh0 + i < OH && c >= 0 && c < OW)
              yp[(cc::index_t)(oh0 + i) * OW + c] = ob[i * TW + lane + 32 * j];
          }
        CC_SYNCWARP();  // the buffer is rewritten by the next chunk
      }
    }
  }
}
