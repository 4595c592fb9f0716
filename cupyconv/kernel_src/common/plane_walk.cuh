// The row walk of the plane kernels (filter_plane.cu for the signal API, depthwise_plane.cu for
// depthwise convolution, ndimage/nd_plane.cu for cupyconv.ndimage): 2-D correlation of one
// input plane with KH x KW taps, no window staged.
//
// A lane owns 4 consecutive output columns and RY output rows (a "chunk").  It walks down the
// RY + KH - 1 input rows that feed them, reading the 4 + KW - 1 input columns it needs of a row
// as 1 + KWB/4 aligned 16-byte loads (neighbouring lanes' reads overlap, and so do the halo rows
// of neighbouring chunks: L1 serves both), and every input row feeds the output rows it overlaps
// (acc[i] += row (x) taps[r - i]).  The next row's loads are issued before the current row's
// multiply-adds, so loads are always in flight without a block barrier (two rows ahead spilled and
// ran slower: benchmarks/notes/signal.md, "2026-11-23 (session 2)").  Callers choose the first
// input column c0 a multiple of 4.
//
// Strided walks (S = 2, the strided depthwise kernels): the 4 output columns read 3 S + KW input
// columns and RY output rows S (RY - 1) + KH input rows (input row r feeds output row i through
// tap row r - S i).  Their first input column is rarely a multiple of 4 (3x3 with padding 1 starts
// at column 8 q - 1), so the window starts at c0, rounded down to one, and the lane's columns
// begin E < 4 elements into it (a compile-time offset, so the window stays in registers).
//
// Boundary modes (boundary.cuh) are applied per loaded row (rows) and per loaded quad or element
// (columns, only where a strip may overhang the image): never per tap.
#pragma once
#include "common.cuh"
#include "boundary.cuh"
#include "stage.cuh"

namespace fp {

// Output rows per chunk: 4 x 4 float accumulators, 2 x 4 doubles (KERNEL_CONSTANTS).
#if !defined(FP_RY_NARROW) || !defined(FP_RY_WIDE)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
template <typename T> struct rows_per_thread {
  static const int value = sizeof(T) <= 4 ? FP_RY_NARROW : FP_RY_WIDE;
};

// How a row load treats columns.  INSIDE: every quad of the lane lies inside the row and rows are
// 16-byte aligned.  QUADS: rows are 16-byte aligned with a multiple of 4 columns and the boundary
// is the fill value, so a quad is wholly inside or outside the row: one test per quad (narrow
// planes, whose strips overhang both edges).  ELEMENTS: the boundary mode per element.
enum { COLS_INSIDE = 0, COLS_QUADS = 1, COLS_ELEMENTS = 2 };

// Types: T, the stored element; A, the compute type it is read as (float for __half).

// A lane's window of one input row: columns c0 .. c0 + KWB + 4 S - 1 (the first E + 3 S + KW are
// used; E + KW <= KWB + S).
template <typename A, int KWB, int S = 1> struct Window {
  A v[KWB / 4 + S][4];
  __device__ __forceinline__ A operator[](int i) const { return v[i / 4][i % 4]; }
};

// Load input row `ih` (already mapped through the boundary mode; -1: a fill row); `span`: the
// columns used (E + 3 S + KW).  QUADS: the caller may pass COLS_QUADS (a compile-time switch: the
// branch costs registers where unused).
template <typename T, typename A, int KWB, bool QUADS, int S>
__device__ __forceinline__ void load_row(Window<A, KWB, S>& w, const T* __restrict__ xp, int ih,
                                         int c0, int W, int span, int boundary, int cols, A fill) {
  const int NQ = KWB / 4 + S;
  const T* row = xp + (cc::index_t)ih * W;
  if (ih >= 0 && cols == COLS_INSIDE) {
#pragma unroll
    for (int q = 0; q < NQ; ++q) cc::load4(row + c0 + 4 * q, w.v[q]);
  } else if (QUADS && cols == COLS_QUADS) {
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
      if (ih >= 0 && (unsigned)(c0 + 4 * q) < (unsigned)W) {
        cc::load4(row + c0 + 4 * q, w.v[q]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) w.v[q][j] = fill;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4 * NQ; ++e) {
      if (e < span) {  // uniform
        const int a = ih < 0 ? -1 : cc::boundary_index(c0 + e, W, boundary);
        w.v[e / 4][e % 4] = a < 0 ? fill : cc::load_as<A>(row[a]);
      }
    }
  }
}

// Walk input rows ih0 .. ih0 + nrows - 1 of plane xp, lane window at columns c0 ..: op(r, row)
// for each, with row r + 1's loads in flight during op.  NR > 0: nrows == NR fixed at compile
// time, the walk fully unrolled so that op's row conditions resolve (no branches, no window
// copies); compiler fences keep the loads one row ahead (hoisted further, they spill).  S, E: the
// column stride and the window offset (above).
template <typename T, typename A, int KWB, bool QUADS, int NR, int S = 1, int E = 0, typename Op>
__device__ __forceinline__ void walk_rows(const T* __restrict__ xp, int ih0, int nrows, int c0,
                                          int H, int W, int KW, int boundary, int cols, A fill,
                                          Op&& op) {
  static_assert(E >= 0 && E < 4, "the window starts at most 3 columns before the lane's first");
  const int span = E + 3 * S + KW;
  if constexpr (NR > 0) {
    Window<A, KWB, S> win[2];
    load_row<T, A, KWB, QUADS, S>(win[0], xp, cc::boundary_index(ih0, H, boundary), c0, W, span,
                                  boundary, cols, fill);
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (r + 1 < NR)
        load_row<T, A, KWB, QUADS, S>(win[(r + 1) & 1], xp,
                                      cc::boundary_index(ih0 + r + 1, H, boundary), c0, W, span,
                                      boundary, cols, fill);
      op(r, win[r & 1]);
      CC_COMPILER_FENCE();
    }
  } else {
    Window<A, KWB, S> cur, nxt;
    load_row<T, A, KWB, QUADS, S>(cur, xp, cc::boundary_index(ih0, H, boundary), c0, W, span,
                                  boundary, cols, fill);
#pragma unroll 1
    for (int r = 0; r < nrows; ++r) {
      if (r + 1 < nrows)  // in flight during this row's multiply-adds
        load_row<T, A, KWB, QUADS, S>(nxt, xp, cc::boundary_index(ih0 + r + 1, H, boundary), c0,
                                      W, span, boundary, cols, fill);
      op(r, cur);
      if (r + 1 < nrows) cur = nxt;
    }
  }
}

// acc = the RY x 4 outputs whose input rows start at ih0 and window at column c0, with taps
// KH x KWB (shared memory, rows padded to KWB with zeros).  NR: walk_rows's (S (RY - 1) + KH, or
// 0); S, E: the stride and the window offset.
template <typename T, typename A, int KWB, int RY, bool QUADS, int NR = 0, int S = 1, int E = 0>
__device__ __forceinline__ void walk_chunk(A (&acc)[RY][4], const T* __restrict__ xp,
                                           const A* taps, int ih0, int c0, int H, int W, int KH,
                                           int KW, int boundary, int cols, A fill) {
#pragma unroll
  for (int i = 0; i < RY; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = A(0);
  walk_rows<T, A, KWB, QUADS, NR, S, E>(xp, ih0, S * (RY - 1) + KH, c0, H, W, KW, boundary, cols,
                                        fill, [&](int r, const Window<A, KWB, S>& cur) {
#pragma unroll
    for (int i = 0; i < RY; ++i) {
      const int kh = r - S * i;
      if (kh >= 0 && kh < KH) {  // uniform: input row r feeds output row i through tap row kh
        A f[KWB / 4][4];
#pragma unroll
        for (int q = 0; q < KWB / 4; ++q) cc::load4(taps + kh * KWB + 4 * q, f[q]);
#pragma unroll
        for (int kw = 0; kw < KWB; ++kw) {
          if (kw < KW) {
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] += cur[E + S * j + kw] * f[kw / 4][kw % 4];
          }
        }
      }
    }
  });
}

// Store a chunk's RY x 4 outputs (lane owns columns ow0 + 4 lane ..) into plane yp of OH x OW:
// 4-element vectors when output quads are aligned (`vec_out`: ow0 and OW multiples of 4, aligned
// base), otherwise through `ob`, this 32-lane group's RY x 128 shared buffer, read back as
// coalesced rows.  Shared by filter_plane.cu and ndimage/nd_plane.cu.
template <typename T, int RY>
__device__ __forceinline__ void store_chunk(T* __restrict__ yp, const T (&acc)[RY][4], int oh0,
                                            int OH, int OW, int ow0, int lane, int vec_out,
                                            T* ob) {
  const int TW = 4 * 32;
  if (vec_out) {  // a quad is wholly inside or outside the row
#pragma unroll
    for (int i = 0; i < RY; ++i)
      if (oh0 + i < OH && ow0 + 4 * lane < OW)
        cc::stg4(yp + (cc::index_t)(oh0 + i) * OW + ow0 + 4 * lane, acc[i]);
    return;
  }
#pragma unroll
  for (int i = 0; i < RY; ++i) cc::stg4(ob + i * TW + 4 * lane, acc[i]);
  CC_SYNCWARP();
#pragma unroll
  for (int i = 0; i < RY; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = ow0 + lane + 32 * j;
      if (oh0 + i < OH && c >= 0 && c < OW) yp[(cc::index_t)(oh0 + i) * OW + c] = ob[i * TW + lane + 32 * j];
    }
  CC_SYNCWARP();  // the buffer is rewritten by the next chunk
}

}  // namespace fp
