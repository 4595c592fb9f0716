// Depthwise convolution, channels-last: activations (N, D, H, W, C) with unit channel stride, one
// filter per channel (K == C, no channel multiplier).  Forward, backward-data and backward-weight.
//
// Channels sit on lanes: a thread owns VEC consecutive channels (one 16-byte vector where C and
// the alignment allow, else narrower; the host picks VEC) and walks a run of RX consecutive
// destination pixels along W.  Neighbouring threads own neighbouring channel vectors of the same
// pixel, so a warp's loads and stores are contiguous segments.  A block is CGB x BY threads: CGB
// channel vectors (threadIdx.x) by BY runs (threadIdx.y); grid y walks the channel blocks.
//
// Forward and backward-data are one kernel, as in depthwise.cu: backward-data of a depthwise conv
// is a transposed depthwise conv of dy (each dx pixel gathers from the dy pixels whose taps reach
// it), so the two differ in how a destination coordinate maps to a source one (dw::src_coord).
// KF > 0 (KH == KW == KF, W stride S in {1, 2}, W dilation 1; H and D any): the row walk.  For each
// kernel row a thread loads the window of source columns its run needs once (NJ vectors instead of
// RX * KF) and feeds every (output, tap) pair that reads each one; which pairs those are is known
// at compile time.  KF == 0: any size, stride and dilation, every tap loaded (L1 serves the
// reuse).  The block's filters are staged in shared memory tap-major in the compute type, so a
// thread reads its channels' taps as vectors.
//
// Backward-weight: the same runs over the forward output; each thread accumulates dy * x for a pass
// of taps (grid z) over the runs of one chunk of the batch (grid x), the block sums its BY rows of
// threads in a fixed order and writes partial[(chunk * C + c) * taps + tap], which chunk_sum.cu
// adds over the chunks in a fixed order: bitwise reproducible, no atomics.
#include "common.cuh"
#include "src_coord.cuh"

// DWCL_RX (destination pixels per run), DWCL_MIN_BLOCKS, DWCL_T2_MIN_BLOCKS and
// DWCL_WGRAD_MIN_BLOCKS (blocks resident per SM of the passes, of backward-data at W stride 2 and
// of backward-weight, which cap their registers), DWCL_ACC and
// DWCL_TAPS (backward-weight accumulators per thread and most taps per pass), DWCL_WGRAD_UNROLL
// (backward-weight runs unrolled together) come from KERNEL_CONSTANTS; the host's plans mirror
// them.
#if !defined(DWCL_RX) || !defined(DWCL_ACC) || !defined(DWCL_TAPS) || !defined(DW_THREADS) || \
    !defined(DWCL_MIN_BLOCKS) || !defined(DWCL_T2_MIN_BLOCKS) || !defined(DWCL_WGRAD_MIN_BLOCKS) || \
    !defined(DWCL_WGRAD_UNROLL)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif

namespace dwcl {

// One load or store instruction of BYTES bytes.
template <int BYTES> struct raw;
template <> struct raw<2> { typedef unsigned short type; };
template <> struct raw<4> { typedef unsigned type; };
template <> struct raw<8> { typedef uint2 type; };
template <> struct raw<16> { typedef uint4 type; };

// v[0..VEC) = p[0..VEC) in the compute type, in loads of up to 16 bytes; p aligned to VEC
// elements or 16 bytes, whichever is less (the host checks global arrays; the staged filters are
// laid out so).
template <int VEC, typename T, typename A>
__device__ __forceinline__ void load_vec(const T* p, A* v) {
  constexpr int BYTES = VEC * (int)sizeof(T), CHUNK = BYTES < 16 ? BYTES : 16;
  constexpr int PER = CHUNK / (int)sizeof(T);
  typedef typename raw<CHUNK>::type R;
#pragma unroll
  for (int c = 0; c < VEC / PER; ++c) {
    const R r = reinterpret_cast<const R*>(p)[c];
    const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
    for (int i = 0; i < PER; ++i) v[c * PER + i] = cc::load_as<A>(e[i]);
  }
}

template <int VEC, typename T, typename A>
__device__ __forceinline__ void store_vec(T* p, const A* v) {
  typedef typename raw<VEC * sizeof(T)>::type R;
  R r;
  T* e = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int i = 0; i < VEC; ++i) e[i] = cc::store_as<T>(v[i]);
  *reinterpret_cast<R*>(p) = r;
}

// Source vector at p, column `col` of its row, zero outside [0, n).  Callers step p by the W
// stride from one column to the next: one pointer add per load, where indexing the row by col *
// stride cost a 64-bit multiply, a reload of the base and five more integer instructions (SASS,
// sm_90), more than the loads' own arithmetic in the 16-bit kernels.
template <int VEC, typename T, typename A>
__device__ __forceinline__ void load_col(const T* p, int col, int n, A* v) {
  if ((unsigned)col < (unsigned)n) {
    load_vec<VEC>(p, v);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = A(0);
  }
}

// Row walk geometry along W, fixed at compile time.  A run's destination pixels are r = 0..RX-1
// (column x0 + r); tap kw of pixel r reads window entry j(r, kw), or none.
//   Forward: the window starts at source column x0 * S - P; j = r * S + kw.
//   Transposed: the host aligns runs so that (x0 + P) % S == 0; pixel r reads source column
//   (x0 + P + r - kw) / S when S divides r - kw; the window starts OFF / S columns before
//   (x0 + P) / S, OFF the smallest multiple of S >= KF - 1, so j = (r - kw + OFF) / S.
template <int KF, int S, int TRANSPOSED>
struct walk {
  static constexpr int RX = DWCL_RX;
  static_assert(!TRANSPOSED || RX % S == 0, "transposed runs start at a multiple of S");
  static constexpr int OFF = S * ((KF - 1 + S - 1) / S);
  static constexpr int NJ = TRANSPOSED ? (RX - 1 + OFF) / S + 1 : (RX - 1) * S + KF;
  static __device__ __forceinline__ constexpr int entry(int r, int kw) {
    return TRANSPOSED ? ((r - kw + OFF) % S == 0 ? (r - kw + OFF) / S : -1) : r * S + kw;
  }
  // First source column of the window of the run starting at destination column x0.
  static __device__ __forceinline__ int first(int x0, int P) {
    return TRANSPOSED ? (x0 + P) / S - OFF / S : x0 * S - P;
  }
};

// One source row of a run: window entries j = 0..NJ-1 (source columns f + j, stepping p by ssw;
// columns past ncols read as zeros) times the taps wk[y][kw] of the NY destination rows it feeds,
// into acc[y][r].  Which (pixel r, tap kw) pairs meet entry j is fixed at compile time (Walk).
// Bit y of FEEDS says whether the row is one of destination row y's: rows that are not are
// skipped, not multiplied by zero taps (a NaN or inf in them must not reach that row).  FEEDS is
// a template argument: tested at run time inside the unrolled loop, the branches kept the
// compiler from issuing the window's loads together (H200, one run: fp32 forward 144 ch 56^2
// 63.8 us with the run-time mask, 42.7 us with the constant one; benchmarks/notes/depthwise.md).
template <int KF, int S, int TRANSPOSED, int VEC, unsigned FEEDS, int NY, typename T, typename A>
__device__ __forceinline__ void walk_row(const T* p, cc::index_t ssw, int f, int ncols,
                                         const A (&wk)[NY][KF][VEC], A (*acc)[DWCL_RX][VEC]) {
  typedef walk<KF, S, TRANSPOSED> Walk;
#pragma unroll
  for (int j = 0; j < Walk::NJ; ++j, p += ssw) {
    A v[VEC];
    load_col<VEC>(p, f + j, ncols, v);
#pragma unroll
    for (int y = 0; y < NY; ++y) {
      if (!(FEEDS >> y & 1u)) continue;
#pragma unroll
      for (int r = 0; r < DWCL_RX; ++r)
#pragma unroll
        for (int kw = 0; kw < KF; ++kw)
          if (Walk::entry(r, kw) == j)
#pragma unroll
            for (int i = 0; i < VEC; ++i) acc[y][r][i] += v[i] * wk[y][kw][i];
    }
  }
}

// Source row sr (row sh of the source plane splane) of a run of RY destination rows, feeding
// the rows of FEEDS: source row sr is tap kh = sr - y of destination row y (forward), or tap
// kh = y + KF - 1 - sr (transposed, unit stride).  wtaps: this thread's channels of the first tap
// of the plane's filter rows in shared memory (rows KW * cb apart).  A row outside the source
// reads as zeros.
template <int KF, int S, int TRANSPOSED, int VEC, unsigned FEEDS, int RY, typename T, typename A>
__device__ __forceinline__ void source_row(const T* splane, cc::index_t ssh, cc::index_t ssw,
                                           int sh, int nrows, int f, int ncols, int sr,
                                           const A* wtaps, int KW, int cb,
                                           A (&acc)[RY][DWCL_RX][VEC]) {
  const bool live = (unsigned)sh < (unsigned)nrows;
  const T* p = splane + (live ? sh : 0) * ssh + (cc::index_t)f * ssw;
  A wk[RY][KF][VEC];
#pragma unroll
  for (int y = 0; y < RY; ++y) {
    if (!(FEEDS >> y & 1u)) continue;  // (its taps are never read)
    const int kh = TRANSPOSED ? y + KF - 1 - sr : sr - y;
#pragma unroll
    for (int kw = 0; kw < KF; ++kw) load_vec<VEC>(wtaps + (kh * KW + kw) * cb, wk[y][kw]);
  }
  walk_row<KF, S, TRANSPOSED, VEC, FEEDS>(p, ssw, f, live ? ncols : 0, wk, acc);
}

// Stage w[c, tap] of channels [cbase, cbase + cb) as wsm[tap * cb + (c - cbase)] in the compute
// type (zero past C).  Tap-major, a thread per channel: no index division, and a thread's taps
// after the first come from the L1 lines its first load brought in (the block's filters are a
// few KB).  Staging in w's own (C, taps) order coalesced the loads but cost a division and ~20
// instructions per element: ~500 per thread of 5x5 filters, a fifth of the forward kernel's
// instructions (ncu, session 17).
template <typename T, typename A>
__device__ __forceinline__ void stage_filters(const T* __restrict__ w, A* wsm, int cbase, int cb,
                                              int C, int taps, int tid, int nt) {
  for (int cl = tid; cl < cb; cl += nt) {
    const bool live = cbase + cl < C;
    const T* wc = w + (cc::index_t)(live ? cbase + cl : 0) * taps;
#pragma unroll 5
    for (int t = 0; t < taps; ++t) wsm[t * cb + cl] = live ? cc::load_as<A>(wc[t]) : A(0);
  }
}

// Backward-weight, one kernel row of one run: acc[base + kw] += g[r] * x[window entry (r, kw)]
// over the run's pixels r: all of them, or with PARTIAL those r < valid (pixels past the row end
// take no part, since their zero dy times an infinite x would be NaN).  Full runs take the
// variant without the test: with it, the branches kept the compiler from issuing the window's
// loads together (SASS, sm_90: one load in flight at a time).
template <int KF, int S, int VEC, bool PARTIAL, typename T, typename A, int NA>
__device__ __forceinline__ void wgrad_row(const T* xp, cc::index_t xsw, int f, int n,
                                          const A (&g)[DWCL_RX][VEC], A (&acc)[NA][VEC],
                                          int base, int valid) {
  typedef walk<KF, S, 0> Walk;
  A v[Walk::NJ][VEC];
#pragma unroll
  for (int j = 0; j < Walk::NJ; ++j, xp += xsw) load_col<VEC>(xp, f + j, n, v[j]);
#pragma unroll
  for (int j = 0; j < Walk::NJ; ++j)
#pragma unroll
    for (int r = 0; r < DWCL_RX; ++r)
#pragma unroll
      for (int kw = 0; kw < KF; ++kw)
        if (Walk::entry(r, kw) == j && (!PARTIAL || r < valid))
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[base + kw][i] += g[r][i] * v[j][i];
}

}  // namespace dwcl

// Forward (TRANSPOSED = 0: src = x, dst = y) or backward-data (1: src = dy, dst = dx) pass.
// dst: contiguous (N, DD, DH, DW, C).  src: read through strides (n, d, h, w), channel stride 1.
// (SD, SH, SW, ...) are the forward convolution's stride, dilation and leading pad throughout.
// RY: destination rows per run (2: a run is RX pixels of two consecutive rows, so each source row
// loaded feeds both; the host takes it only with the row walk at unit stride and dilation in H).
// Grid: x = ceil(runs / (BY * rounds)), y = channel blocks.  Shared memory: taps * CGB * VEC of A.
template <typename T, int KF, int S, int VEC, int TRANSPOSED, int RY>
__global__ void __launch_bounds__(DW_THREADS, (TRANSPOSED && S == 2) ? DWCL_T2_MIN_BLOCKS
                                                                     : DWCL_MIN_BLOCKS)
depthwise_cl(const T* __restrict__ src,
             const T* __restrict__ w,
             const T* __restrict__ bias,
             T* __restrict__ dst,
             const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int has_bias = (int)prm[0], C = (int)prm[1], runs_per_row = (int)prm[2],
      rounds = (int)prm[3], lead = (int)prm[4];
  const cc::index_t runs = prm[5];
  const int ID = (int)prm[6], IH = (int)prm[7], IW = (int)prm[8], OD = (int)prm[9],
      OH = (int)prm[10], OW = (int)prm[11], KD = (int)prm[12], KH = (int)prm[13],
      KW = (int)prm[14], SD = (int)prm[15], SH = (int)prm[16], SW = (int)prm[17],
      DD = (int)prm[18], DH = (int)prm[19], DW = (int)prm[20], PD = (int)prm[21],
      PH = (int)prm[22], PW = (int)prm[23];
  const cc::index_t ssn = prm[24], ssd = prm[26], ssh = prm[27], ssw = prm[28];  // prm[25]: C's, 1
  typedef typename cc::acc_type<T>::type A;
  constexpr int K1 = KF > 0 ? KF : 1, S1 = S > 0 ? S : 1;  // (KF, S = 0: the generic path)
  typedef dwcl::walk<K1, S1, TRANSPOSED> Walk;
  constexpr int RX = DWCL_RX;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* const wsm = reinterpret_cast<A*>(smem_raw);
  // Channels of this block's filters in shared memory: rows of cb values, a thread's VEC at
  // threadIdx.x * VEC, so its vectors are 16-byte aligned where VEC * sizeof(A) >= 16.
  const int cb = blockDim.x * VEC;
  const int cbase = blockIdx.y * cb;
  const int c0 = cbase + threadIdx.x * VEC;
  const int taps = KD * KH * KW;
  const int tid = threadIdx.x + blockDim.x * threadIdx.y;
  dwcl::stage_filters(w, wsm, cbase, cb, C, taps, tid, blockDim.x * blockDim.y);
  __syncthreads();
  if (c0 >= C) return;  // (no barrier follows)
  const int SDs = TRANSPOSED ? OD : ID, SHs = TRANSPOSED ? OH : IH, SWs = TRANSPOSED ? OW : IW;
  const int DDd = TRANSPOSED ? ID : OD, DHd = TRANSPOSED ? IH : OH, DWd = TRANSPOSED ? IW : OW;
  A b[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) b[i] = (!TRANSPOSED && has_bias) ? cc::load_as<A>(bias[c0 + i]) : A(0);
  const A* wthr = wsm + threadIdx.x * VEC;  // this thread's channels of tap 0
  const bool narrow = runs <= 0xffffffffLL;  // 32-bit index divisions suffice
  for (int round = 0; round < rounds; ++round) {
    const cc::index_t run = ((cc::index_t)blockIdx.x * rounds + round) * blockDim.y + threadIdx.y;
    if (run >= runs) break;
    cc::index_t row = run;
    const int x0 = cc::divmod(row, runs_per_row, narrow) * RX - lead;  // first destination column
    const int h = cc::divmod(row, (DHd + RY - 1) / RY, narrow) * RY;  // first destination row
    const int d = cc::divmod(row, DDd, narrow), n = (int)row;
    A acc[RY][RX][VEC];
#pragma unroll
    for (int y = 0; y < RY; ++y)
#pragma unroll
      for (int r = 0; r < RX; ++r)
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[y][r][i] = A(0);
    for (int kd = 0; kd < KD; ++kd) {
      const int sd = dw::src_coord<TRANSPOSED>(d, kd, SD, DD, PD, SDs);
      if (sd < 0) continue;
      const T* splane = src + n * ssn + sd * ssd + c0;
      if (KF > 0 && RY > 1) {
        // Source rows one at a time, each feeding the RY destination rows whose taps reach it.
        // With RY = 2 the first row feeds only destination row 0, the last only row 1, those
        // between both: the two ends are peeled off, so every row's FEEDS is a constant.
        static_assert(RY <= 2, "the peeled row walk takes two destination rows");
        const int f = Walk::first(x0, PW);
        const int sh0 = TRANSPOSED ? h + PH - (KF - 1) : h - PH;
        const A* wtaps = wthr + kd * KH * KW * cb;
        constexpr unsigned BOTH = (1u << RY) - 1u;
        dwcl::source_row<K1, S1, TRANSPOSED, VEC, 1u>(splane, ssh, ssw, sh0, SHs, f, SWs, 0,
                                                       wtaps, KW, cb, acc);
#pragma unroll 1
        for (int sr = 1; sr < KF + RY - 2; ++sr)
          dwcl::source_row<K1, S1, TRANSPOSED, VEC, BOTH>(splane, ssh, ssw, sh0 + sr, SHs, f,
                                                           SWs, sr, wtaps, KW, cb, acc);
        dwcl::source_row<K1, S1, TRANSPOSED, VEC, 1u << (RY - 1)>(
            splane, ssh, ssw, sh0 + KF + RY - 2, SHs, f, SWs, KF + RY - 2, wtaps, KW, cb, acc);
      } else if (KF > 0) {
        // The kernel rows one at a time (unrolling them, so that all KF * NJ loads could be in
        // flight, measured slower: more registers, fewer resident threads).  A row outside the
        // source reads as zeros (its column bound is 0) rather than being skipped.
        const int f = Walk::first(x0, PW);
#pragma unroll 1
        for (int kh = 0; kh < K1; ++kh) {
          const int sh = dw::src_coord<TRANSPOSED>(h, kh, SH, DH, PH, SHs);
          const T* srow = splane + (sh < 0 ? 0 : sh) * ssh;
          const int ncols = sh < 0 ? 0 : SWs;
          const A* wrow = wthr + (kd * KH + kh) * KW * cb;
          A wk[1][K1][VEC];
#pragma unroll
          for (int kw = 0; kw < KF; ++kw) dwcl::load_vec<VEC>(wrow + kw * cb, wk[0][kw]);
          dwcl::walk_row<K1, S1, TRANSPOSED, VEC, 1u>(srow + (cc::index_t)f * ssw, ssw, f, ncols,
                                                       wk, acc);
        }
      } else {
        for (int kh = 0; kh < KH; ++kh) {
          const int sh = dw::src_coord<TRANSPOSED>(h, kh, SH, DH, PH, SHs);
          if (sh < 0) continue;
          const T* srow = splane + sh * ssh;
          const A* wrow = wthr + (kd * KH + kh) * KW * cb;
#pragma unroll
          for (int r = 0; r < RX; ++r) {
            for (int kw = 0; kw < KW; ++kw) {
              const int sw = dw::src_coord<TRANSPOSED>(x0 + r, kw, SW, DW, PW, SWs);
              if (sw < 0) continue;
              A v[VEC], wv[VEC];
              dwcl::load_vec<VEC>(srow + sw * ssw, v);
              dwcl::load_vec<VEC>(wrow + kw * cb, wv);
#pragma unroll
              for (int i = 0; i < VEC; ++i) acc[0][r][i] += v[i] * wv[i];
            }
          }
        }
      }
    }
#pragma unroll
    for (int y = 0; y < RY; ++y) {
      if (h + y >= DHd) break;
      T* out = dst + (((cc::index_t)n * DDd + d) * DHd + h + y) * DWd * C + c0;
#pragma unroll
      for (int r = 0; r < RX; ++r) {
        const int col = x0 + r;
        if (col < 0 || col >= DWd) continue;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[y][r][i] += b[i];
        dwcl::store_vec<VEC>(out + (cc::index_t)col * C, acc[y][r]);
      }
    }
  }
}

// Backward-weight.  Block (chunk, channel block, pass) sums dy * x over the runs [chunk *
// runs_per_chunk, ...) of the forward output for the taps of its pass: KF > 0, kernel rows
// [pass * PR, pass * PR + PR) of the KD * KH rows (row walk as in depthwise_cl); KF == 0, taps
// [pass * TP, pass * TP + TP).  x and dy read through strides, channel stride 1.
// Grid: (chunks, channel blocks, passes).  Shared memory: BY * CGB * VEC of A.
template <typename T, int KF, int S, int VEC>
__global__ void __launch_bounds__(DW_THREADS, DWCL_WGRAD_MIN_BLOCKS)
depthwise_cl_wgrad(const T* __restrict__ x,
                   const T* __restrict__ dy,
                   typename cc::acc_type<T>::type* __restrict__ partial,
                   const cc::index_t* __restrict__ prm) {
  const int C = (int)prm[0], runs_per_row = (int)prm[1];
  const cc::index_t runs = prm[2], runs_per_chunk = prm[3];
  const int ID = (int)prm[4], IH = (int)prm[5], IW = (int)prm[6], OD = (int)prm[7],
      OH = (int)prm[8], OW = (int)prm[9], KD = (int)prm[10], KH = (int)prm[11],
      KW = (int)prm[12], SD = (int)prm[13], SH = (int)prm[14], SW = (int)prm[15],
      DD = (int)prm[16], DH = (int)prm[17], DW = (int)prm[18], PD = (int)prm[19],
      PH = (int)prm[20], PW = (int)prm[21];
  const cc::index_t xsn = prm[22], xsd = prm[24], xsh = prm[25], xsw = prm[26];  // prm[23]: 1
  const cc::index_t gsn = prm[27], gsd = prm[29], gsh = prm[30], gsw = prm[31];  // prm[28]: 1
  // A thread's step of BY runs as (rows, runs in a row), from the host: when they were computed
  // here, the compiler redid the two divisions inside the run loop to free their registers.
  const int step_oh = (int)prm[32], step_i = (int)prm[33];
  typedef typename cc::acc_type<T>::type A;
  typedef dwcl::walk<(KF > 0 ? KF : 1), (S > 0 ? S : 1), 0> Walk;
  constexpr int RX = DWCL_RX;
  // Taps per pass: DWCL_ACC accumulators, at most DWCL_TAPS taps; KF > 0 takes whole kernel rows.
  constexpr int TP = DWCL_ACC / VEC < DWCL_TAPS ? DWCL_ACC / VEC : DWCL_TAPS;
  constexpr int PR = KF > 0 ? (TP / KF > 0 ? TP / KF : 1) : 1;
  constexpr int NA = KF > 0 ? PR * KF : TP;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* const red = reinterpret_cast<A*>(smem_raw);
  const int cb = blockDim.x * VEC;
  const int c0 = (blockIdx.y * blockDim.x + threadIdx.x) * VEC;
  const bool live = c0 < C;  // (dead threads still take part in the block sums)
  const int chunk = blockIdx.x, pass = blockIdx.z;
  const int taps = KD * KH * KW, rows_k = KD * KH;
  A acc[NA][VEC];
#pragma unroll
  for (int t = 0; t < NA; ++t)
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[t][i] = A(0);
  // Generic path: (kd, kh, kw) of each tap of this pass.
  int tkd[KF > 0 ? 1 : NA], tkh[KF > 0 ? 1 : NA], tkw[KF > 0 ? 1 : NA];
  if (KF == 0) {
#pragma unroll
    for (int t = 0; t < (KF > 0 ? 1 : NA); ++t) {
      const int tap = min(pass * TP + t, taps - 1);
      tkw[t] = tap % KW; tkh[t] = (tap / KW) % KH; tkd[t] = tap / (KW * KH);
    }
  }
  // Thread row threadIdx.y takes runs r_begin + threadIdx.y + k * BY: a block's rows of threads
  // work on neighbouring runs, whose windows share cache lines (contiguous shares per thread row
  // measured up to 1.5x slower on wide rows of few channels).  A run's (n, od, oh, run in row)
  // advance from the previous one's by BY runs, carried by comparison: dividing each run's index
  // cost about a third of a 3x3 run's instructions (SASS, sm_90: four divisions).
  const cc::index_t r_begin = (cc::index_t)chunk * runs_per_chunk;
  const cc::index_t r_end = min(runs, r_begin + runs_per_chunk);
  const bool narrow = runs <= 0xffffffffLL;  // 32-bit index divisions suffice
  cc::index_t row = r_begin + threadIdx.y;
  int next_i = cc::divmod(row, runs_per_row, narrow), next_oh = cc::divmod(row, OH, narrow);
  int next_od = cc::divmod(row, OD, narrow), next_n = (int)row;  // the next run's coordinates
#pragma unroll DWCL_WGRAD_UNROLL
  for (cc::index_t run = r_begin + threadIdx.y; live && run < r_end; run += blockDim.y) {
    const int x0 = next_i * RX, oh = next_oh, od = next_od, n = next_n;
    next_i += step_i;
    next_oh += step_oh;
    if (next_i >= runs_per_row) { next_i -= runs_per_row; ++next_oh; }
    if (next_oh >= OH) {  // into a later (n, od) plane: divisions only here
      const int planes = next_oh / OH;
      next_oh -= planes * OH;
      next_od += planes;
      if (next_od >= OD) { next_n += next_od / OD; next_od %= OD; }
    }
    const T* grow = dy + n * gsn + od * gsd + oh * gsh + c0;
    // Pixels past the row end take no part (their zero dy times an infinite x would be NaN).
    const int valid = OW - x0;
    A g[RX][VEC];
#pragma unroll
    for (int r = 0; r < RX; ++r) dwcl::load_col<VEC>(grow + (cc::index_t)(x0 + r) * gsw, x0 + r, OW, g[r]);
    const T* xn = x + n * xsn + c0;
    if (KF > 0) {
#pragma unroll
      for (int p = 0; p < PR; ++p) {
        const int kr = pass * PR + p;  // kernel row: kd * KH + kh
        if (kr >= rows_k) break;
        // (KH == KF on this path: a division by a constant)
        const int id = dw::src_coord<false>(od, kr / (KF > 0 ? KF : 1), SD, DD, PD, ID);
        const int ih = dw::src_coord<false>(oh, kr % (KF > 0 ? KF : 1), SH, DH, PH, IH);
        if ((id | ih) < 0) continue;
        const int f = Walk::first(x0, PW);
        const T* xp = xn + id * xsd + ih * xsh + (cc::index_t)f * xsw;
        constexpr int K1 = KF > 0 ? KF : 1, S1 = S > 0 ? S : 1;
        if (valid >= RX)
          dwcl::wgrad_row<K1, S1, VEC, false>(xp, xsw, f, IW, g, acc, p * K1, valid);
        else
          dwcl::wgrad_row<K1, S1, VEC, true>(xp, xsw, f, IW, g, acc, p * K1, valid);
      }
    } else {
#pragma unroll
      for (int t = 0; t < NA; ++t) {
        if (pass * TP + t >= taps) break;
        const int id = dw::src_coord<false>(od, tkd[t], SD, DD, PD, ID);
        const int ih = dw::src_coord<false>(oh, tkh[t], SH, DH, PH, IH);
        if ((id | ih) < 0) continue;
        const T* xrow = xn + id * xsd + ih * xsh;
#pragma unroll
        for (int r = 0; r < RX; ++r) {
          const int iw = dw::src_coord<false>(x0 + r, tkw[t], SW, DW, PW, IW);
          if (iw < 0 || r >= valid) continue;
          A v[VEC];
          dwcl::load_vec<VEC>(xrow + iw * xsw, v);
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[t][i] += g[r][i] * v[i];
        }
      }
    }
  }
  // Block sum over threadIdx.y in a fixed order, one tap at a time (constant indices keep acc in
  // registers): the block's threads share the cb channel sums of a tap (a thread per channel,
  // adding the BY rows in order; one thread row summing its channel vectors left the block
  // waiting on it) and write the chunk's partial sums.
  const int first_tap = KF > 0 ? pass * PR * KW : pass * TP;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
  const int cbase = blockIdx.y * cb;
#pragma unroll
  for (int t = 0; t < NA; ++t) {
    if (first_tap + t >= taps) break;
    __syncthreads();  // the previous tap's sums are read
#pragma unroll
    for (int i = 0; i < VEC; ++i) red[threadIdx.y * cb + threadIdx.x * VEC + i] = acc[t][i];
    __syncthreads();
    for (int e = tid; e < cb && cbase + e < C; e += nt) {
      A s = A(0);
      for (int y = 0; y < (int)blockDim.y; ++y) s += red[y * cb + e];
      partial[((cc::index_t)chunk * C + cbase + e) * taps + first_tap + t] = s;
    }
  }
}
