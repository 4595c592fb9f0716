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
// Here no window is staged: the row walk of plane_walk.cuh.  A warp owns a strip of 128 output
// columns and RW rows (CHUNKS chunks of RY rows, one after the other); lane l owns columns
// 4l .. 4l+3.  Tile columns start at 128 t - d, where d < 4 makes every strip's first input column
// ow0 - PW a multiple of 4, so the quads are aligned whatever the padding.
// Template: KWB, the filter-width bucket; KF, a square filter size fixed at compile time (0: any).
// Taps: KH x KWB in shared memory, read as broadcasts (`flip`: g reversed on both axes).
// Stores: fp::store_chunk (4-element vectors where output quads are aligned, `vec_out`: d == 0,
// OW % 4 == 0, aligned base; otherwise a per-warp shared buffer read back as coalesced rows).
// Warps never wait for each other after the taps are staged.
#include "plane_walk.cuh"

// Resident blocks per SM the register budget is cut for: the loads in flight scale with resident
// warps.  float: 4 (64 registers) up to 8 filter columns, 3 for 16 (it spills at 64); double: 2
// (the 2026-11-23 sweep in benchmarks/notes/signal.md, "2026-11-23 (session 2)").  A module define
// may override it.
#ifndef FP_MIN_BLOCKS
#define FP_MIN_BLOCKS(T, KWB) (sizeof(T) > 4 ? 2 : (KWB) <= 8 ? 4 : 3)
#endif

#if !defined(FP_WARPS) || !defined(FP_TW) || !defined(FP_CHUNKS)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
namespace fp {
const int WARPS = FP_WARPS;
const int TW = FP_TW;          // output columns per strip: 4 per lane
const int CHUNKS = FP_CHUNKS;  // row chunks per warp: RW = CHUNKS * RY output rows
static_assert(TW == 4 * 32, "a strip is 4 columns per lane");
}  // namespace fp

template <typename T, int KWB, int KF>
__global__ void __launch_bounds__(32 * FP_WARPS, FP_MIN_BLOCKS(T, KWB))
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
  // "warp": a 32-lane group (a strip is 4 columns x 32 lanes), not the hardware warp.  On AMD a
  // wave holds one (wave32) or two (wave64) whole groups; each group has its own obuf rows and
  // CC_SYNCWARP orders them within its wave (common.cuh), so both wave sizes are right.
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int strip = blockIdx.x % tiles_w, band = blockIdx.x / tiles_w;
  const int ow0 = strip * TW - d, iw0 = ow0 - PW;
  const int oh_warp = (band * fp::WARPS + warp) * RW;
  // (most strips lie inside a wide image: the quad-tested loads are not worth their registers)
  const int cols = vec_in && iw0 >= 0 && iw0 + TW + KWB <= W ? fp::COLS_INSIDE : fp::COLS_ELEMENTS;

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
      fp::walk_chunk<T, T, KWB, RY, false>(acc, xp, taps, oh0 - PH, iw0 + 4 * lane, H, W, KH,
                                           KW, boundary, cols, fill);

      fp::store_chunk<T, RY>(yp, acc, oh0, OH, OW, ow0, lane, vec_out, obuf + warp * RY * TW);
    }
  }
}
