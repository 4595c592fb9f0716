// Operand loaders: how the GEMM main loop sees a tensor as a matrix.
//
// A loader owns the global -> register -> shared-memory path of one operand.  `load(k0)` fetches
// the k-slice [k0, k0 + BK) of the block's ROWS rows into registers (zeros outside the matrix or
// in padding); `store(s)` writes it to shared memory k-major, s[k * LD + row], the layout the main
// loop reads.  Rows are M rows for the A operand and N columns for the B operand.
#pragma once
#include "common.cuh"

namespace cc {

// Four consecutive elements of T from global memory, widened to the accumulator type, in one
// vector load (16 bytes for float, 8 for half; double takes two 16-byte loads).
__device__ __forceinline__ void ldg4(const float* p, float* v) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void ldg4(const double* p, double* v) {
  const double2 a = *reinterpret_cast<const double2*>(p);
  const double2 b = *reinterpret_cast<const double2*>(p + 2);
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
__device__ __forceinline__ void ldg4(const __half* p, float* v) {
  const __half2* q = reinterpret_cast<const __half2*>(p);
  const float2 a = __half22float2(q[0]);
  const float2 b = __half22float2(q[1]);
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}

// A strided matrix: element (row, k) at base[row * rs + k * ks].  KCONTIG says which dim is
// contiguous in memory; threads walk along it so that a warp's loads coalesce.  With `vec` (the
// host checked unit stride along that dim, 4-element alignment of the other stride and of the
// base, and an extent that is a multiple of 4) each thread moves 4-vectors.
template <typename T, typename A, int ROWS, int BK, int THREADS, bool KCONTIG, int LD>
struct DenseLoader {
  static constexpr int VECS = ROWS * BK / (4 * THREADS);
  static_assert(VECS >= 1 && ROWS * BK == VECS * 4 * THREADS, "tile must split into 4-vectors");
  const T* base;
  index_t rs, ks;
  int rows, K;
  bool vec;
  A regs[VECS][4];

  __device__ __forceinline__ void coords(int v, int& r, int& kk) const {
    const int idx = threadIdx.x + v * THREADS;
    if (KCONTIG) { r = idx / (BK / 4); kk = (idx % (BK / 4)) * 4; }
    else { r = (idx % (ROWS / 4)) * 4; kk = idx / (ROWS / 4); }
  }

  __device__ __forceinline__ void load(int k0) {
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
      const int gk = k0 + kk;
      if (vec) {
        if (r < rows && gk < K) ldg4(base + r * rs + gk * ks, regs[v]);
        else { regs[v][0] = regs[v][1] = regs[v][2] = regs[v][3] = A(0); }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rr = KCONTIG ? r : r + e, kq = KCONTIG ? gk + e : gk;
          regs[v][e] = (rr < rows && kq < K) ? load_as<A>(base[rr * rs + kq * ks]) : A(0);
        }
      }
    }
  }

  __device__ __forceinline__ void store(A* s) const {
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (KCONTIG) s[(kk + e) * LD + r] = regs[v][e];
        else s[kk * LD + r + e] = regs[v][e];
      }
    }
  }
};

// The convolution problem as the implicit-im2col loader needs it (spatial dims padded to 3).
struct ConvShape {
  int Cg, D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW;
  index_t xsn, xsc, xsd, xsh, xsw;
};

// A operand of forward convolution read straight from x: row m = output pixel (n, od, oh, ow),
// column k = tap and input channel, ordered (c, kd, kh, kw) channels-first or (kd, kh, kw, c)
// channels-last to match the weight's memory order.  Padding and dilation are predicates; no
// buffer is written.  Channels-first walks threads along m (neighbouring output pixels are
// neighbouring input pixels); channels-last walks along k (neighbouring channels).
template <typename T, typename A, int ROWS, int BK, int THREADS, bool CL, int LD>
struct Im2colLoader {
  static constexpr int ELEMS = ROWS * BK / THREADS;
  static constexpr int NROWS = CL ? ELEMS : 1;  // distinct rows a thread touches
  static_assert(CL ? THREADS % BK == 0 : THREADS % ROWS == 0, "loader thread mapping");
  const T* x;       // x + group's first channel
  const ConvShape* sh;
  int K;            // Cg * KD * KH * KW
  const T* rowbase[NROWS];
  int id0[NROWS], ih0[NROWS], iw0[NROWS];
  A regs[ELEMS];

  __device__ __forceinline__ int row_of(int e) const {
    return CL ? (int)(threadIdx.x / BK) + e * (THREADS / BK) : (int)(threadIdx.x % ROWS);
  }
  __device__ __forceinline__ int k_of(int e) const {
    return CL ? (int)(threadIdx.x % BK) : (int)(threadIdx.x / ROWS) + e * (THREADS / ROWS);
  }

  // Decompose this thread's rows once; the k loop then only decodes taps.
  __device__ __forceinline__ void init(const T* x_, const ConvShape* s, int m0, int M) {
    x = x_;
    sh = s;
    K = s->Cg * s->KD * s->KH * s->KW;
#pragma unroll
    for (int e = 0; e < NROWS; ++e) {
      int m = m0 + row_of(e);
      if (m < M) {
        const int ow = m % s->OW; m /= s->OW;
        const int oh = m % s->OH; m /= s->OH;
        const int od = m % s->OD; const int n = m / s->OD;
        rowbase[e] = x + n * s->xsn;
        id0[e] = od * s->SD - s->PD; ih0[e] = oh * s->SH - s->PH; iw0[e] = ow * s->SW - s->PW;
      } else {
        rowbase[e] = x;
        id0[e] = -(1 << 29);  // every tap falls outside: the row reads zeros
        ih0[e] = iw0[e] = 0;
      }
    }
  }

  __device__ __forceinline__ void load(int k0) {
    const ConvShape& s = *sh;
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) {
      const int k = k0 + k_of(e);
      const int re = CL ? e : 0;
      int c, t;
      if (CL) { c = k % s.Cg; t = k / s.Cg; }
      else { const int taps = s.KD * s.KH * s.KW; c = k / taps; t = k - c * taps; }
      const int kw = t % s.KW; t /= s.KW;
      const int kh = t % s.KH; const int kd = t / s.KH;
      const int id = id0[re] + kd * s.DD, ih = ih0[re] + kh * s.DH, iw = iw0[re] + kw * s.DW;
      const bool in = k < K && (unsigned)id < (unsigned)s.D && (unsigned)ih < (unsigned)s.H &&
                      (unsigned)iw < (unsigned)s.W;
      regs[e] = in ? load_as<A>(rowbase[re][c * s.xsc + id * s.xsd + ih * s.xsh + iw * s.xsw]) : A(0);
    }
  }

  __device__ __forceinline__ void store(A* smem) const {
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) smem[k_of(e) * LD + row_of(e)] = regs[e];
  }
};

}  // namespace cc
