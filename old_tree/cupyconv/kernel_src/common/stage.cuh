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
      v[u] = in ? load(p.i0, p.i1, p.i2) : zero<A>();
      p.next();
    }
#pragma unroll
    for (int u = 0; u < STAGE_BATCH; ++u)
      if (at[u] >= 0) smem[at[u]] = v[u];
  }
}

}  // namespace cc

namespace cc {

// Stage `planes` windows of rows x cols, window z from src + zoff[z] (NO_OFFSET: zeros), at
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
      const index_t o = in ? zoff[z] : NO_OFFSET;
      const int ih = r0 + r;
      const bool live = o != NO_OFFSET && col_in && (unsigned)ih < (unsigned)H;
      v[u] = live ? load_as<A>(src[o + ih * sh + cw]) : zero<A>();
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
  // An empty window (a transposed tile that no source row or column reaches: large strides) has
  // nothing to stage; the row walk below would never end on it.
  if (rows <= 0 || cols <= 0) return;
  if (cols <= nt) {
    stage_rows(win, src, zoff, planes, rows, cols, rows_max, pitch, r0, c0, H, W, sh, sw, tid, nt);
    return;
  }
  stage_box(win, planes, rows, cols, tid, nt,
      [&](int z, int r, int col) -> A {
        const index_t o = zoff[z];
        const int ih = r0 + r, iw = c0 + col;
        return (o != NO_OFFSET && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                   ? load_as<A>(src[o + ih * sh + iw * sw]) : zero<A>();
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
__device__ __forceinline__ void load4(const bf16* p, float (&o)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const bf16* h = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = bf16_to_float(h[e]);
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
      const index_t o = in ? zoff[z] : NO_OFFSET;
      const int ih = r0 + r;
      if (o != NO_OFFSET && col_in && (unsigned)ih < (unsigned)H) {
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
  if (rows <= 0 || cols <= 0) return;  // empty window: see stage_planes
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

// The 6 values a thread's 4 output columns read from row r of a staged window (3 taps wide):
// v[i] = base[r * pitch + SHIFT + i], from aligned 4-vectors (two, or three where SHIFT = 3),
// or zeros for r >= rows.  The 3x3 depthwise variants slide this down their columns; SHIFT is
// where the window starts in its first 4-vector (stage_quads_async keeps the source alignment).
template <int SHIFT, typename S, typename A>
__device__ __forceinline__ void window_row6(const S* base, int r, int rows, int pitch, A (&v)[6]) {
  if (r < rows) {
    A q[3][4];
    load4(base + r * pitch, q[0]);
    load4(base + r * pitch + 4, q[1]);
    if (SHIFT == 3) load4(base + r * pitch + 8, q[2]);
#pragma unroll
    for (int i = 0; i < 6; ++i) v[i] = q[(SHIFT + i) / 4][(SHIFT + i) % 4];
  } else {
#pragma unroll
    for (int i = 0; i < 6; ++i) v[i] = A(0);  // A: an accumulator type
  }
}

// Asynchronous copy of 4 consecutive elements from global to shared memory (16 bytes of floats,
// 8 of halves, 2 x 16 of doubles; both addresses aligned to 4 elements); `valid` false writes
// zeros.  On sm_80+ this is cp.async: no registers, and the copy runs while the block computes
// on the previous buffer (stage_quads_async + async_wait).  Elsewhere (HIP, older NVIDIA) it is a
// plain load and store, so the same double-buffered kernel runs, just without the overlap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CC_CP_ASYNC 1
#endif

template <typename T>
__device__ __forceinline__ void copy4_async(T* dst, const T* src, bool valid) {
  constexpr int bytes = 4 * (int)sizeof(T);
#ifdef CC_CP_ASYNC
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  const int n = valid ? (bytes == 8 ? 8 : 16) : 0;
  if (bytes == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(src), "r"(n));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
    if (bytes == 32)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s + 16), "l"(src + 2),
                   "r"(n));
  }
#else
  if (bytes == 8) {
    *reinterpret_cast<uint2*>(dst) = valid ? *reinterpret_cast<const uint2*>(src) : make_uint2(0, 0);
  } else {
    const uint4 z = make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4*>(dst)[0] = valid ? reinterpret_cast<const uint4*>(src)[0] : z;
    if (bytes == 32) reinterpret_cast<uint4*>(dst)[1] = valid ? reinterpret_cast<const uint4*>(src)[1] : z;
  }
#endif
}

// Close the group of copies issued so far (one group per staged buffer).
__device__ __forceinline__ void async_commit() {
#ifdef CC_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Wait until at most N of this thread's groups are still in flight (then a barrier makes every
// thread's copies visible to the block).
template <int N>
__device__ __forceinline__ void async_wait() {
#ifdef CC_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Stage `planes` windows of rows x (4 * quads) elements with copy4_async: window z reads the
// plane at src + plane_off(z), rows r0 + r and columns c0a + 4 q (c0a a multiple of 4; W, the row
// stride and plane offsets multiples of 4, rows contiguous: the host checks, so each group lies
// wholly inside or outside the image).  Group (z, r, q) lands at win + (z * rows_max + r) * pitch
// + 4 q: shared memory keeps the source's 4-alignment, so a conv window starting at column c0
// begins `c0 - c0a` elements into each row.
// Offset in its plane of the 4-vector group at row r0 + r, column c0a + 4 q, and whether it lies
// in the H x W image (`in`; offset 0 where not).
__device__ __forceinline__ index_t quad_offset(int r0, int r, int c0a, int q, int H, int W,
                                               index_t sh, bool& in) {
  const int ih = r0 + r, iw = c0a + 4 * q;
  in = (unsigned)ih < (unsigned)H && iw >= 0 && iw < W;
  return in ? ih * sh + iw : 0;
}

template <typename T, typename PlaneOff>
__device__ __forceinline__ void stage_quads_async(T* win, const T* __restrict__ src,
                                                  PlaneOff plane_off, int planes, int rows,
                                                  int quads, int rows_max, int pitch, int r0,
                                                  int c0a, int H, int W, index_t sh, int tid,
                                                  int nt) {
  const int total = planes * rows * quads;
  BoxWalk p(tid, nt, rows, quads);
  for (int e = tid; e < total; e += nt) {
    bool in;
    const index_t g = quad_offset(r0, p.i1, c0a, p.i2, H, W, sh, in);
    copy4_async(win + (p.i0 * rows_max + p.i1) * pitch + 4 * p.i2, src + plane_off(p.i0) + g, in);
    p.next();
  }
}


// stage_quads_async where each thread owns one (row, 4-vector) position of every window (rows *
// quads <= nt): its bounds test and offsets are computed once and it steps across the planes, a
// few instructions per copy; otherwise the box walk.
template <typename T, typename PlaneOff>
__device__ __forceinline__ void stage_planes_async(T* win, const T* __restrict__ src,
                                                   PlaneOff plane_off, int planes, int rows,
                                                   int quads, int rows_max, int pitch, int r0,
                                                   int c0a, int H, int W, index_t sh, int tid,
                                                   int nt) {
  const int per_plane = rows * quads;
  if (per_plane > nt) {
    stage_quads_async(win, src, plane_off, planes, rows, quads, rows_max, pitch, r0, c0a, H, W,
                      sh, tid, nt);
    return;
  }
  const int zs = nt / per_plane, z0 = tid / per_plane;
  if (z0 >= zs) return;
  const int pos = tid - z0 * per_plane, r = pos / quads, q = pos - r * quads;
  bool in;
  const index_t g = quad_offset(r0, r, c0a, q, H, W, sh, in);
  T* s = win + (z0 * rows_max + r) * pitch + 4 * q;
  const int s_step = zs * rows_max * pitch;
  for (int z = z0; z < planes; z += zs, s += s_step) copy4_async(s, src + plane_off(z) + g, in);
}

}  // namespace cc
