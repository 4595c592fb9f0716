// Operand loaders: how the GEMM main loops see a tensor as a matrix.
//
// A loader owns the global -> register -> shared-memory path of one operand.  `begin(k0)` sets its
// cursor to the k-slice starting at k0; each `load()` fetches the slice [k, k + BK) of the block's
// ROWS rows into registers of type A (zeros outside the matrix or in padding) and advances the
// cursor by BK; `store(s)` writes it to shared memory, converted to s's element type: k-major,
// s[k * LD + row], for the SIMT loop, or with ROW_K row-major in k, s[row * LD + k], for the
// tensor-core loop (gemm_mma.cuh), where each group of 4 consecutive k of one row is one vector
// store.  Loaders whose operand allows it (`async_ok`) also `issue<Slot>(s)` the slice as 16-byte
// copies straight to shared memory, each chunk where the multistage loop's Slot puts it; that
// loop starts them with `begin_async(k0)` (a loader may map its rows to threads differently in
// that mode).  Rows are M rows for the A operand and N columns for the B operand; K is where k
// ends (a split-K block ends before the matrix does).
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
__device__ __forceinline__ void ldg4(const bf16* p, float* v) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const bf16* h = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = bf16_to_float(h[e]);
}
// 16-bit values kept as they are (the tensor-core loop): one 8-byte load.
template <typename H>
__device__ __forceinline__ void ldg4(const H* p, H* v) {
  *reinterpret_cast<uint2*>(v) = *reinterpret_cast<const uint2*>(p);
}

// Four register values stored as four consecutive shared-memory elements (one 8- or 16-byte
// store; `p` aligned to four elements).
template <typename S, typename R>
__device__ __forceinline__ void sts4(S* p, const R* v) {
  S t[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) t[e] = store_as<S>(v[e]);
  if (sizeof(S) == 2) *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(t);
  else if (sizeof(S) == 4) *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(t);
  else {
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = t[e];
  }
}

// 16-byte copies from global to shared memory for the multistage loop (gemm_mma.cuh): cp.async on
// NVIDIA (zero-filled when `valid` is false: src-size 0 reads nothing), a plain copy elsewhere.
// Slices in flight per main loop: deep on NVIDIA, where the copies are asynchronous; two on AMD,
// where they are not (and LDS is 64 KB).
#if defined(__CUDACC__)
#define CC_MMA_STAGES MMA_STAGES
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
#else
#define CC_MMA_STAGES MMA_STAGES_AMD
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  *reinterpret_cast<uint4*>(dst) = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait() {}
#endif

// Where a multistage loop puts the 16-byte chunk that starts at (row, k) of a slice (an element
// offset; k is a multiple of the chunk): rows of LD elements, padded so that ldmatrix reads are
// conflict-free (the mma.sync loop) ...
template <int LD>
struct PaddedRows {
  static __device__ __forceinline__ int at(int row, int k) { return row * LD + k; }
};
// ... or lines of exactly 128 bytes whose 8 chunks are permuted by XOR with line % 8: the layouts
// that wgmma's 128-byte swizzle mode reads (from a 1024-byte aligned base).  A warp's copies of
// consecutive chunks of a line still land in 8 distinct bank groups.  K-major: one line per row,
// its 128 bytes of k (BK * sizeof = 128) ...
template <typename S>
struct SwizzledK128 {
  static constexpr int CH = 16 / (int)sizeof(S);
  static __device__ __forceinline__ int at(int row, int k) {
    return row * 8 * CH + (((k / CH) ^ (row & 7)) * CH);
  }
};
// ... MN-major (the chunk holds rows row .. row + CH - 1 at one k): atoms of E = 128 bytes of rows
// by the BK k of the slice, one line per k.
template <typename S, int BK>
struct SwizzledMN128 {
  static constexpr int CH = 16 / (int)sizeof(S), E = 8 * CH;
  static __device__ __forceinline__ int at(int row, int k) {
    return (row / E) * (BK * E) + k * E + ((((row % E) / CH) ^ (k & 7)) * CH);
  }
};

// One element of a loader's slice to shared memory at (row, k) in the main loop's layout.
template <bool ROW_K, int LD, typename S, typename A>
__device__ __forceinline__ void sts1(S* s, int row, int k, const A v) {
  s[ROW_K ? row * LD + k : k * LD + row] = store_as<S>(v);
}

// A strided matrix: element (row, k) at base[row * rs + k * ks].  KCONTIG says which dim is
// contiguous in memory; threads walk along it so that a warp's loads coalesce.  With `vec` (the
// host checked unit stride along that dim, 4-element alignment of the other stride and of the
// base, and an extent that is a multiple of 4) each thread moves 4-vectors.
template <typename T, typename A, int ROWS, int BK, int THREADS, bool KCONTIG, int LD,
          bool ROW_K = false>
struct DenseLoader {
  static constexpr int VECS = ROWS * BK / (4 * THREADS);
  static_assert(VECS >= 1 && ROWS * BK == VECS * 4 * THREADS, "tile must split into 4-vectors");
  const T* base;
  index_t rs, ks;
  int rows, K;
  int vec;  // 0: element loads; 1: 4-element vectors; 2: also whole aligned 16-byte chunks
  // With kdiv > 0 (KCONTIG only), k = q * kdiv + r sits at base[row * rs + q * khs + r * ks]: a
  // channels-first weight (K, C, taps) read in the (tap, c) order of the implicit loader, with
  // kdiv = C, ks = taps, khs = 1, so no transposed copy is made.  Never vectorized.
  int kdiv = 0;
  index_t khs = 0;
  int kc;  // cursor: first k of the next slice
  A regs[VECS][4];
  // Multistage path: 16-byte chunks (CH elements) of a slice, NCH per thread, each at a fixed
  // (row, k offset) of the slice; its address is stepped by BK * ks per slice (no 64-bit products
  // in the loop: they were most of the Hopper loop's instructions), rows_ok holds `r < rows`.
  static constexpr int CH = 16 / (int)sizeof(T), NCH = cmax(1, ROWS * BK / (CH * THREADS));
  const T* chunk_ptr[NCH];
  unsigned rows_ok;

  __device__ __forceinline__ void begin(int k0) { kc = k0; }

  // (row, k) of chunk i of this thread within a slice
  __device__ __forceinline__ void chunk_coords(int i, int& r, int& kk) const {
    const int q = threadIdx.x + i * THREADS;
    if (KCONTIG) { r = q / (BK / CH); kk = (q % (BK / CH)) * CH; }
    else { r = (q % (ROWS / CH)) * CH; kk = q / (ROWS / CH); }
  }

  __device__ __forceinline__ void begin_async(int k0) {
    kc = k0;
    rows_ok = 0;
#pragma unroll
    for (int i = 0; i < NCH; ++i) {
      int r, kk;
      chunk_coords(i, r, kk);
      rows_ok |= (unsigned)(r < rows) << i;
      chunk_ptr[i] = base + r * rs + (k0 + kk) * ks;
    }
  }

  __device__ __forceinline__ void coords(int v, int& r, int& kk) const {
    const int idx = threadIdx.x + v * THREADS;
    if (KCONTIG) { r = idx / (BK / 4); kk = (idx % (BK / 4)) * 4; }
    else { r = (idx % (ROWS / 4)) * 4; kk = idx / (ROWS / 4); }
  }

  // Multistage path (tensor-core loops): the slice as 16-byte chunks along the contiguous dim
  // (KMAJOR: consecutive k of a row; else consecutive rows at one k), copied straight to shared
  // memory.  Needs chunk-aligned rows (vec 2, checked by the host).
  static constexpr bool KMAJOR = KCONTIG;
  __device__ __forceinline__ bool async_ok() const { return ROW_K && vec >= 2 && kdiv == 0; }

  template <typename Slot, typename S>
  __device__ __forceinline__ void issue(S* s) {
    static_assert(NCH * CH * THREADS == ROWS * BK, "slice of whole chunks");
    const int k0 = kc;
    kc += BK;
#pragma unroll
    for (int i = 0; i < NCH; ++i) {
      int r, kk;
      chunk_coords(i, r, kk);
      const bool ok = (rows_ok >> i & 1u) && k0 + kk < K;
      cp_async16(s + Slot::at(r, kk), ok ? chunk_ptr[i] : base, ok);
      chunk_ptr[i] += BK * ks;
    }
  }

  __device__ __forceinline__ void load() {
    const int k0 = kc;
    kc += BK;
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
      const int gk = k0 + kk;
      if (vec) {
        if (r < rows && gk < K) ldg4(base + r * rs + gk * ks, regs[v]);
        else { regs[v][0] = regs[v][1] = regs[v][2] = regs[v][3] = zero<A>(); }
      } else if (KCONTIG && kdiv > 0) {
        int q = gk / kdiv, rem = gk - q * kdiv;  // one division per 4 elements
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          regs[v][e] = (r < rows && gk + e < K) ? load_as<A>(base[r * rs + q * khs + rem * ks])
                                                : zero<A>();
          if (++rem == kdiv) { rem = 0; ++q; }
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rr = KCONTIG ? r : r + e, kq = KCONTIG ? gk + e : gk;
          regs[v][e] = (rr < rows && kq < K) ? load_as<A>(base[rr * rs + kq * ks]) : zero<A>();
        }
      }
    }
  }

  template <typename S>
  __device__ __forceinline__ void store(S* s) const {
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
      if (ROW_K && KCONTIG) {
        sts4(s + r * LD + kk, regs[v]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (KCONTIG) sts1<ROW_K, LD>(s, r, kk + e, regs[v][e]);
          else sts1<ROW_K, LD>(s, r + e, kk, regs[v][e]);
        }
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
// column k = (tap, c) with the channel fastest (the weights are given in that order).  Padding and
// dilation are predicates; no buffer is written.
//
// Each thread moves groups of 4 consecutive k (4 channels of one tap) of one row.  Channels-first
// walks threads along m (neighbouring output pixels read neighbouring input pixels); channels-last
// walks them along k (neighbouring channels are contiguous: one vector load per group when
// `vec`).  When Cg is a multiple of BK (`tap_uniform`), a whole k-slice shares one tap: the cursor
// keeps (channel, kd, kh, kw) and steps it without a division, and each row is bounds-checked once
// per slice; otherwise each element decodes its own (k -> tap, channel) with divisions.
template <typename T, typename A, int ROWS, int BK, int THREADS, bool CL, int LD, bool ROW_K = false>
struct Im2colLoader {
  static constexpr int GROUPS = ROWS * BK / (4 * THREADS);  // 4-element groups per thread
  static constexpr int KQ = BK / 4;                          // groups along k per slice
  static constexpr int NROWS = CL ? GROUPS : 1;              // distinct rows a thread touches
  static_assert(GROUPS >= 1 && ROWS * BK == GROUPS * 4 * THREADS, "tile must split into groups");
  static_assert(CL ? THREADS % KQ == 0 : THREADS % ROWS == 0, "loader thread mapping");
  // 16-byte chunks of the multistage path: CH channels each, CPR per row of a slice; a thread
  // copies NCH of them, on rows async_row(i) (its rowbase[i] etc. in that mode).
  static constexpr int CH = 16 / (int)sizeof(T), CPR = BK / CH, NCH = ROWS * BK / (CH * THREADS);
  static_assert(!(CL && ROW_K) || (NCH >= 1 && NCH <= NROWS && THREADS % CPR == 0), "chunk mapping");
  const ConvShape* sh;
  const T* x;
  int m0, M;  // the block's first row, and the rows
  int K, taps;
  bool tap_uniform, async_mode;  // (async_mode: the multistage loop runs, `begin_async`)
  int vec;  // 0: element loads; 1: 4-channel vectors; 2: also aligned 16-byte channel chunks
  // cursor: first k of the next slice, and its channel and tap (in the multistage mode, the
  // channel and tap of this thread's chunk of it, k + chunk_k)
  int kc, c0, kd, kh, kw;
  // In the multistage mode, the cursor's dilated tap offsets and its element offset from a
  // chunk's tap-(0, 0, 0) channel-0 address, stepped per slice without products.
  int dd, dh, dw;
  index_t toff;
  // Each row's base: x at its image (`load`), or in the multistage mode its chunk's address at
  // tap (0, 0, 0), channel 0 (x for rows past M); and its input coordinates at that tap.
  const T* rowbase[NROWS];
  int id0[NROWS], ih0[NROWS], iw0[NROWS];
  A regs[GROUPS][4];

  __device__ __forceinline__ int row_of(int j) const {
    return CL ? (int)(threadIdx.x / KQ) + j * (THREADS / KQ) : (int)(threadIdx.x % ROWS);
  }
  __device__ __forceinline__ int kq_of(int j) const {
    return 4 * (CL ? (int)(threadIdx.x % KQ) : (int)(threadIdx.x / ROWS) + j * (THREADS / ROWS));
  }

  __device__ __forceinline__ int async_row(int i) const {
    return (int)(threadIdx.x / CPR) + i * (THREADS / CPR);
  }
  // ... and the k of its chunks within a slice, the same for all of them (THREADS % CPR == 0)
  static __device__ __forceinline__ int chunk_k() { return (int)(threadIdx.x % CPR) * CH; }

  static constexpr bool KMAJOR = true;
  // (the multistage mode: channels-last, chunk-aligned channels, so a chunk never straddles taps)
  __device__ __forceinline__ bool async_ok() const { return CL && ROW_K && vec >= 2; }

  __device__ __forceinline__ void init(const T* x_, const ConvShape* s, int m0_, int M_, int vec_) {
    sh = s;
    x = x_; m0 = m0_; M = M_;
    taps = s->KD * s->KH * s->KW;
    K = s->Cg * taps;
    tap_uniform = s->Cg % BK == 0;
    vec = vec_;
  }

  // Decompose this thread's rows once (the k loop then only decodes taps): the rows of its groups
  // (`load`), or in the multistage mode those of its chunks (`issue`).
  __device__ __forceinline__ void decode_rows(bool chunks) {
    const ConvShape* s = sh;
#pragma unroll
    for (int r = 0; r < NROWS; ++r) {
      if (chunks && r >= NCH) break;
      int m = m0 + (chunks ? async_row(r) : row_of(r));
      if (m < M) {
        const int ow = m % s->OW; m /= s->OW;
        const int oh = m % s->OH; m /= s->OH;
        const int od = m % s->OD; const int n = m / s->OD;
        id0[r] = od * s->SD - s->PD; ih0[r] = oh * s->SH - s->PH; iw0[r] = ow * s->SW - s->PW;
        rowbase[r] = x + n * s->xsn;
        if (chunks) rowbase[r] += id0[r] * s->xsd + ih0[r] * s->xsh + iw0[r] * s->xsw;
      } else {
        rowbase[r] = x;
        id0[r] = -(1 << 29);  // every tap falls outside: the row reads zeros
        ih0[r] = iw0[r] = 0;
      }
    }
  }

  // Whether input element (row r, channel c, tap (a, b, d)) lies inside x (not padding), and its
  // offset from the row's base.  The offset is signed: views with negative strides have negative
  // offsets, so it cannot double as the padding flag.
  __device__ __forceinline__ bool offset(int r, int c, int a, int b, int d, index_t& off) const {
    const ConvShape& s = *sh;
    const int id = id0[r] + a * s.DD, ih = ih0[r] + b * s.DH, iw = iw0[r] + d * s.DW;
    off = c * s.xsc + id * s.xsd + ih * s.xsh + iw * s.xsw;
    return (unsigned)id < (unsigned)s.D && (unsigned)ih < (unsigned)s.H &&
           (unsigned)iw < (unsigned)s.W;
  }

  __device__ __forceinline__ void split_tap(int t, int& a, int& b, int& d) const {
    d = t % sh->KW; t /= sh->KW;
    b = t % sh->KH; a = t / sh->KH;
  }

  __device__ __forceinline__ void begin(int k0) {
    async_mode = false;
    start(k0);
  }
  __device__ __forceinline__ void begin_async(int k0) {
    async_mode = true;
    start(k0);
  }
  __device__ __forceinline__ void start(int k0) {
    decode_rows(async_mode);
    kc = k0;
    const int k = k0 + (async_mode ? chunk_k() : 0);
    const int t = k / sh->Cg;
    c0 = k - t * sh->Cg;
    split_tap(t, kd, kh, kw);
    if (async_mode) {
      const ConvShape& s = *sh;
      dd = kd * s.DD; dh = kh * s.DH; dw = kw * s.DW;
      toff = c0 * s.xsc + dd * s.xsd + dh * s.xsh + dw * s.xsw;
    }
  }

  // Step the register-staged mode's cursor (`load`, tap-uniform slices: Cg a multiple of BK) to
  // the next slice: channels first, then kw, kh, kd (no division).
  __device__ __forceinline__ void step_slice() {
    c0 += BK;
    while (c0 >= sh->Cg) {
      c0 -= sh->Cg;
      if (++kw == sh->KW) {
        kw = 0;
        if (++kh == sh->KH) { kh = 0; ++kd; }
      }
    }
  }

  // The multistage mode's cursor step: as step_slice, carrying the offsets along (a tap change
  // costs a few adds, a slice within a tap one).  A slice spans BK / Cg taps where Cg < BK.
  __device__ __forceinline__ void step_slice_async() {
    const ConvShape& s = *sh;
    c0 += BK;
    toff += BK * s.xsc;
    while (c0 >= s.Cg) {
      c0 -= s.Cg;
      toff -= s.Cg * s.xsc;
      if (++kw < s.KW) { dw += s.DW; toff += s.DW * s.xsw; continue; }
      kw = 0; toff -= dw * s.xsw; dw = 0;
      if (++kh < s.KH) { dh += s.DH; toff += s.DH * s.xsh; continue; }
      kh = 0; toff -= dh * s.xsh; dh = 0;
      ++kd; dd += s.DD; toff += s.DD * s.xsd;
    }
  }

  template <typename Slot, typename S>
  __device__ __forceinline__ void issue(S* smem) {
    const ConvShape& s = *sh;
    const int kk = chunk_k();
    const bool kin = kc + kk < K;
    kc += BK;
#pragma unroll
    for (int i = 0; i < NCH; ++i) {
      const bool ok = kin && (unsigned)(id0[i] + dd) < (unsigned)s.D &&
                      (unsigned)(ih0[i] + dh) < (unsigned)s.H && (unsigned)(iw0[i] + dw) < (unsigned)s.W;
      cp_async16(smem + Slot::at(async_row(i), kk), ok ? rowbase[i] + toff : x, ok);
    }
    step_slice_async();
  }

  __device__ __forceinline__ void load() {
    const ConvShape& s = *sh;
    const int k0 = kc;
    kc += BK;
    if (tap_uniform) {
      const bool kin = k0 < K;
#pragma unroll
      for (int j = 0; j < GROUPS; ++j) {
        const int r = CL ? j : 0;
        index_t off;
        if (!(kin && offset(r, c0 + kq_of(j), kd, kh, kw, off))) {
          regs[j][0] = regs[j][1] = regs[j][2] = regs[j][3] = zero<A>();
        } else if (vec) {
          ldg4(rowbase[r] + off, regs[j]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) regs[j][e] = load_as<A>(rowbase[r][off + e * s.xsc]);
        }
      }
      step_slice();
    } else if (vec) {  // (Cg % 4 == 0: a group of 4 channels lies within one tap)
#pragma unroll
      for (int j = 0; j < GROUPS; ++j) {
        const int r = CL ? j : 0;
        const int k = k0 + kq_of(j);
        const int t = k / s.Cg;
        int a, b, d;
        split_tap(t, a, b, d);
        index_t off;
        if (k < K && offset(r, k - t * s.Cg, a, b, d, off)) ldg4(rowbase[r] + off, regs[j]);
        else regs[j][0] = regs[j][1] = regs[j][2] = regs[j][3] = zero<A>();
      }
    } else {
#pragma unroll
      for (int j = 0; j < GROUPS; ++j) {
        const int r = CL ? j : 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = k0 + kq_of(j) + e;
          const int t = k / s.Cg;
          int a, b, d;
          split_tap(t, a, b, d);
          index_t off;
          regs[j][e] = (k < K && offset(r, k - t * s.Cg, a, b, d, off)) ? load_as<A>(rowbase[r][off])
                                                                          : zero<A>();
        }
      }
    }
  }

  template <typename S>
  __device__ __forceinline__ void store(S* smem) const {
#pragma unroll
    for (int j = 0; j < GROUPS; ++j) {
      if (ROW_K) {
        sts4(smem + row_of(j) * LD + kq_of(j), regs[j]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) sts1<ROW_K, LD>(smem, row_of(j), kq_of(j) + e, regs[j][e]);
      }
    }
  }
};

// B operand of backward-weight read straight from channels-last x: row j = (tap, c) of the
// weight gradient, column k = output pixel (n, od, oh, ow) -- the implicit im2col matrix of the
// forward pass, transposed.  Threads walk along rows (channels are contiguous) in groups of 4 rows
// whose (tap, channel) are decoded once; each slice decodes its pixel once per thread.  With
// `vec` (Cg % 4 == 0, unit channel stride, aligned) a group is one vector load.
template <typename T, typename A, int ROWS, int BK, int THREADS, int LD, bool ROW_K = false>
struct Im2colTLoader {
  static constexpr int VECS = ROWS * BK / (4 * THREADS);
  static_assert(VECS >= 1 && ROWS * BK == VECS * 4 * THREADS, "tile must split into 4-vectors");
  // Multistage mode (vec 2: Cg a multiple of the chunk, aligned): chunks of CH rows (channels of
  // one tap, contiguous in x) at one pixel; a thread always copies the same chunk of rows, at
  // NCH pixels per slice.
  static constexpr int CH = 16 / (int)sizeof(T), CPK = ROWS / CH, NCH = ROWS * BK / (CH * THREADS);
  const T* x;       // x + group's first channel
  const ConvShape* sh;
  int rows, K;      // valid rows (taps * Cg - j0) and the end of this block's pixel range
  int vec;
  int kc;
  int chunk_row;                                  // first row of this thread's chunk
  index_t chunk_coff;                             // ... its channel offset
  int chunk_dd, chunk_dh, chunk_dw;               // ... its dilated tap offsets
  index_t coff[VECS][4];         // channel offset of each row
  int tdd[VECS][4], thd[VECS][4], twd[VECS][4];  // dilated tap offsets of each row
  A regs[VECS][4];

  __device__ __forceinline__ void coords(int v, int& r, int& kk) const {
    const int idx = threadIdx.x + v * THREADS;
    r = (idx % (ROWS / 4)) * 4;
    kk = idx / (ROWS / 4);
  }

  // Rows (not k) are contiguous here: MN-major chunks, for the loops that take them.
  static constexpr bool KMAJOR = false;
  __device__ __forceinline__ bool async_ok() const { return ROW_K && vec >= 2; }

  // (row j -> channel offset and dilated tap offsets)
  __device__ __forceinline__ void decode_row(int j, index_t& co, int& dd, int& dh, int& dw) const {
    const int c = j % sh->Cg;
    int t = j / sh->Cg;
    const int kw = t % sh->KW; t /= sh->KW;
    const int kh = t % sh->KH; const int kd = t / sh->KH;
    co = c * sh->xsc;
    dd = kd * sh->DD; dh = kh * sh->DH; dw = kw * sh->DW;
  }

  template <typename Slot, typename S>
  __device__ __forceinline__ void issue(S* smem) {
    static_assert(NCH >= 1 && THREADS % CPK == 0 && NCH * CH * THREADS == ROWS * BK, "chunk mapping");
    const ConvShape& s = *sh;
    const int k0 = kc;
    kc += BK;
#pragma unroll
    for (int i = 0; i < NCH; ++i) {
      const int kk = (int)threadIdx.x / CPK + i * (THREADS / CPK);
      int m = k0 + kk;
      const bool kin = m < K;
      const int ow = m % s.OW; m /= s.OW;
      const int oh = m % s.OH; m /= s.OH;
      const int od = m % s.OD; const int n = m / s.OD;
      const int id = od * s.SD - s.PD + chunk_dd, ih = oh * s.SH - s.PH + chunk_dh,
                iw = ow * s.SW - s.PW + chunk_dw;
      const bool in = kin && chunk_row < rows && (unsigned)id < (unsigned)s.D &&
                      (unsigned)ih < (unsigned)s.H && (unsigned)iw < (unsigned)s.W;
      cp_async16(smem + Slot::at(chunk_row, kk),
                 in ? x + n * s.xsn + chunk_coff + id * s.xsd + ih * s.xsh + iw * s.xsw : x, in);
    }
  }

  __device__ __forceinline__ void init(const T* x_, const ConvShape* s, int j0, int rows_, int vec_) {
    x = x_; sh = s; rows = rows_; vec = vec_;
    chunk_row = (int)(threadIdx.x % CPK) * CH;
    decode_row(j0 + chunk_row, chunk_coff, chunk_dd, chunk_dh, chunk_dw);
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
#pragma unroll
      for (int e = 0; e < 4; ++e) decode_row(j0 + r + e, coff[v][e], tdd[v][e], thd[v][e], twd[v][e]);
    }
  }

  __device__ __forceinline__ void begin(int k0) { kc = k0; }
  __device__ __forceinline__ void begin_async(int k0) { kc = k0; }  // (one row mapping)

  __device__ __forceinline__ void load() {
    const ConvShape& s = *sh;
    const int k0 = kc;
    kc += BK;
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
      int m = k0 + kk;
      const bool kin = m < K;
      const int ow = m % s.OW; m /= s.OW;
      const int oh = m % s.OH; m /= s.OH;
      const int od = m % s.OD; const int n = m / s.OD;
      const int id0 = od * s.SD - s.PD, ih0 = oh * s.SH - s.PH, iw0 = ow * s.SW - s.PW;
      const T* base = x + n * s.xsn;
      if (vec) {
        const int id = id0 + tdd[v][0], ih = ih0 + thd[v][0], iw = iw0 + twd[v][0];
        const bool in = kin && r < rows && (unsigned)id < (unsigned)s.D &&
                        (unsigned)ih < (unsigned)s.H && (unsigned)iw < (unsigned)s.W;
        if (in) ldg4(base + coff[v][0] + id * s.xsd + ih * s.xsh + iw * s.xsw, regs[v]);
        else { regs[v][0] = regs[v][1] = regs[v][2] = regs[v][3] = zero<A>(); }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int id = id0 + tdd[v][e], ih = ih0 + thd[v][e], iw = iw0 + twd[v][e];
          const bool in = kin && r + e < rows && (unsigned)id < (unsigned)s.D &&
                          (unsigned)ih < (unsigned)s.H && (unsigned)iw < (unsigned)s.W;
          regs[v][e] = in ? load_as<A>(base[coff[v][e] + id * s.xsd + ih * s.xsh + iw * s.xsw]) : zero<A>();
        }
      }
    }
  }

  template <typename S>
  __device__ __forceinline__ void store(S* smem) const {
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
      int r, kk;
      coords(v, r, kk);
#pragma unroll
      for (int e = 0; e < 4; ++e) sts1<ROW_K, LD>(smem, r + e, kk, regs[v][e]);
    }
  }
};

}  // namespace cc
