// Staging a box of global memory into shared memory with many loads in flight per thread.
//
// The bandwidth-bound kernels (depthwise, separable) stage a halo window per block before they
// compute.  A plain "for (e = tid; e < total; e += nt) smem[e] = load(e)" loop waits for each load
// before issuing the next (about a microsecond per element on an H100: the first depthwise kernel
// spent most of its time there), so loads are issued STAGE_BATCH at a time (4: more costs registers that the
// resident blocks need more) into registers and
// stored afterwards; element coordinates are stepped without integer divisions.
#pragma once
#include "common.cuh"

#define STAGE_BATCH 4

namespace cc {

// Coordinates (i0, i1, i2) of element e of an n0 x n1 x n2 box (i2 fastest), advanced by a fixed
// step per next() with carries instead of divisions.
struct BoxWalk {
  int i0, i1, i2, d0, d1, d2, n1, n2;
  __device__ __forceinline__ BoxWalk(int e, int step, int n1_, int n2_) : n1(n1_), n2(n2_) {
    int q = e / n2;
    i2 = e - q * n2; i0 = q / n1; i1 = q - i0 * n1;
    q = step / n2;
    d2 = step - q * n2; d0 = q / n1; d1 = q - d0 * n1;
  }
  __device__ __forceinline__ void next() {
    i2 += d2; i1 += d1; i0 += d0;
    if (i2 >= n2) { i2 -= n2; ++i1; }
    if (i1 >= n1) { i1 -= n1; ++i0; }
  }
};

// smem[index(i0, i1, i2)] = load(i0, i1, i2) over the n0 x n1 x n2 box, by threads tid < nt.
template <typename A, typename Load, typename Index>
__device__ __forceinline__ void stage_box(A* smem, int n0, int n1, int n2, int tid, int nt,
                                          Load load, Index index) {
  const int total = n0 * n1 * n2;
  BoxWalk p(tid, nt, n1, n2);
  for (int e = tid; e < total; e += STAGE_BATCH * nt) {
    A v[STAGE_BATCH];
    int at[STAGE_BATCH];
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u) {
      const bool in = e + u * nt < total;
      at[u] = in ? index(p.i0, p.i1, p.i2) : -1;
      v[u] = in ? load(p.i0, p.i1, p.i2) : A(0);
      p.next();
    }
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u)
      if (at[u] >= 0) smem[at[u]] = v[u];
  }
}

}  // namespace cc

namespace cc {

// Stage `planes` windows of rows x cols, window z from src + zoff[z] (zoff[z] < 0: zeros), at
// win[(z * rows_max + r) * pitch + c]; element (r, c) of a window reads source row r0 + r, column
// c0 + c, zeros outside H x W.  Each thread owns one column (its bounds test and column offset
// are computed once) and walks rows across the windows: a few instructions per element, and
// STAGE_BATCH loads in flight.  Needs cols <= nt.
template <typename A, typename T>
__device__ __forceinline__ void stage_rows(A* win, const T* __restrict__ src, const index_t* zoff,
                                           int planes, int rows, int cols, int rows_max, int pitch,
                                           int r0, int c0, int H, int W, index_t sh, index_t sw,
                                           int tid, int nt) {
  const int rstep = nt / cols;
  if (tid >= rstep * cols) return;
  const int col = tid % cols, iw = c0 + col;
  const bool col_in = (unsigned)iw < (unsigned)W;
  const index_t cw = (index_t)iw * sw;
  int r = tid / cols, z = 0;
  while (r >= rows) { r -= rows; ++z; }
  for (int rr = tid / cols; rr < planes * rows; rr += STAGE_BATCH * rstep) {
    A v[STAGE_BATCH];
    int at[STAGE_BATCH];
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u) {
      const bool in = z < planes;
      const index_t o = in ? zoff[z] : -1;
      const int ih = r0 + r;
      v[u] = (o >= 0 && col_in && (unsigned)ih < (unsigned)H) ? load_as<A>(src[o + ih * sh + cw]) : A(0);
      at[u] = in ? (z * rows_max + r) * pitch + col : -1;
      r += rstep;
      while (r >= rows) { r -= rows; ++z; }
    }
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u)
      if (at[u] >= 0) win[at[u]] = v[u];
  }
}

// stage_rows where each thread can own a column (cols <= nt), else the generic box walk: the
// same windows either way.
template <typename A, typename T>
__device__ __forceinline__ void stage_planes(A* win, const T* __restrict__ src, const index_t* zoff,
                                             int planes, int rows, int cols, int rows_max, int pitch,
                                             int r0, int c0, int H, int W, index_t sh, index_t sw,
                                             int tid, int nt) {
  if (cols <= nt) {
    stage_rows(win, src, zoff, planes, rows, cols, rows_max, pitch, r0, c0, H, W, sh, sw, tid, nt);
    return;
  }
  stage_box(win, planes, rows, cols, tid, nt,
      [&](int z, int r, int col) -> A {
        const index_t o = zoff[z];
        const int ih = r0 + r, iw = c0 + col;
        return (o >= 0 && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                   ? load_as<A>(src[o + ih * sh + iw * sw]) : A(0);
      },
      [&](int z, int r, int col) { return (z * rows_max + r) * pitch + col; });
}

// Four consecutive elements as accumulator values (16-byte float4, two double2, or four halves
// in 8 bytes), from global or shared memory; `p` must be aligned to four elements.
__device__ __forceinline__ void load4(const float* p, float (&o)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
}
__device__ __forceinline__ void load4(const double* p, double (&o)[4]) {
  const double2 a = reinterpret_cast<const double2*>(p)[0], b = reinterpret_cast<const double2*>(p)[1];
  o[0] = a.x; o[1] = a.y; o[2] = b.x; o[3] = b.y;
}
__device__ __forceinline__ void load4(const __half* p, float (&o)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __half* h = reinterpret_cast<const __half*>(&raw);
  o[0] = __half2float(h[0]); o[1] = __half2float(h[1]);
  o[2] = __half2float(h[2]); o[3] = __half2float(h[3]);
}

// stage_rows with 4-element vector loads: the loads start at column c0a = c0 - shift (a multiple
// of 4) and span `quads` groups of 4 columns; W, the row strides and the plane offsets are
// multiples of 4 and the rows contiguous (the host checks), so each group is wholly inside or
// outside the image.  Stored without the shift: window column c is smem column c, as with
// stage_rows, so 4-aligned window columns stay 4-aligned in shared memory.
// A block's window then takes a quarter of the load instructions and, for the tile sizes used,
// a single round trip to memory.  Needs quads <= nt.
template <typename A, typename T>
__device__ __forceinline__ void stage_rows4(A* win, const T* __restrict__ src, const index_t* zoff,
                                            int planes, int rows, int quads, int rows_max,
                                            int pitch, int r0, int c0a, int shift, int H, int W,
                                            index_t sh, int tid, int nt) {
  const int rstep = nt / quads;
  if (tid >= rstep * quads) return;
  const int q = tid % quads, iw = c0a + 4 * q;
  const bool col_in = iw >= 0 && iw < W;
  int r = tid / quads, z = 0;
  while (r >= rows) { r -= rows; ++z; }
  for (int rr = tid / quads; rr < planes * rows; rr += STAGE_BATCH * rstep) {
    A v[STAGE_BATCH][4];
    int at[STAGE_BATCH];
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u) {
      const bool in = z < planes;
      const index_t o = in ? zoff[z] : -1;
      const int ih = r0 + r;
      if (o >= 0 && col_in && (unsigned)ih < (unsigned)H) {
        load4(src + o + ih * sh + iw, v[u]);
      } else {
        v[u][0] = v[u][1] = v[u][2] = v[u][3] = A(0);
      }
      at[u] = in ? (z * rows_max + r) * pitch + 4 * q : -1;
      r += rstep;
      while (r >= rows) { r -= rows; ++z; }
    }
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u)
      if (at[u] >= 0) {
#pragma unroll
        for (int c = 0; c < 4; ++c)  // window column 4 q + c - shift
          if (4 * q + c >= shift && 4 * q + c - shift < pitch) win[at[u] + c - shift] = v[u][c];
      }
  }
}

// The windows of `planes` planes: vector loads where the host allowed them (vec) and a thread
// per column group fits, else stage_planes.
template <typename A, typename T>
__device__ __forceinline__ void stage_windows(A* win, const T* __restrict__ src, const index_t* zoff,
                                             int planes, int rows, int cols, int rows_max,
                                             int pitch, int r0, int c0, int H, int W, index_t sh,
                                             index_t sw, int vec, int tid, int nt) {
  if (vec) {
    const int shift = ((c0 % 4) + 4) % 4, quads = (cols + shift + 3) / 4;
    if (quads <= nt) {
      stage_rows4(win, src, zoff, planes, rows, quads, rows_max, pitch, r0, c0 - shift, shift, H,
                  W, sh, tid, nt);
      return;
    }
  }
  stage_planes(win, src, zoff, planes, rows, cols, rows_max, pitch, r0, c0, H, W, sh, sw, tid, nt);
}

// Row r of a thread's 8-column slice of a staged window (two aligned 4-vectors at base + r *
// pitch), or zeros for r >= rows: the 3x3 depthwise variants slide this down their columns.
template <typename A>
__device__ __forceinline__ void window_row8(const A* base, int r, int rows, int pitch, A (&v)[8]) {
  if (r < rows) {
    A lo[4], hi[4];
    load4(base + r * pitch, lo);
    load4(base + r * pitch + 4, hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) { v[i] = lo[i]; v[i + 4] = hi[i]; }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = A(0);
  }
}

}  // namespace cc
