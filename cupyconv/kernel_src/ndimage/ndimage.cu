// Kernels of cupyconv.ndimage (scipy.ndimage's correlate/convolve family).
//
// Every kernel is a template <Tin, Tout, A>: the input's storage type, the output's, and the
// compute type A (float, double or nd::complex of them) in which values are staged and summed.
// The host (cupyconv/_ndimage) folds convolution, complex conjugation and origins into the
// weights and the left halo, so the kernels only correlate:
//
//   y[i] = sum_k w[k] * X(i + k - left)        X: the input read through the boundary mode
//
// Weights arrive in A, followed by two more A values: cval, the constant of mode "constant", and
// a divisor applied to each sum (1 except for uniform filters).  The
// sizes come packed in an int64 array `prm` (one argument however many dims; see each kernel).
//
//   nd_line_row   1-d pass along the last (contiguous) axis: a block stages a run of one row plus
//                 its halo in shared memory (boundary applied while staging), each thread slides
//                 a register window over RX adjacent outputs, and the outputs leave through
//                 shared memory as coalesced rows.
//   nd_line_col   1-d pass along any other axis, the array seen as (outer, n, inner): a block
//                 stages TN = 8 * RY rows of the axis plus halo by 32 columns of `inner` (coalesced
//                 loads and stores), each thread walks RY outputs down its column.
//   nd_line_direct  the same pass without shared memory, one output per thread: filters too long
//                 for the staged tiles.
//   nd_dense      N-d correlation with a dense N-d filter (nonzero taps listed by the host), one
//                 output per thread; outputs whose window lies inside the array read through
//                 precomputed linear offsets, the others map every coordinate.
//   nd_dense_tile the same correlation for arrays of at most 3 dims (seen as planes, rows,
//                 columns) whose tile fits in shared memory: a block owns ND_TILE_Z planes of
//                 ND_TILE_ROWS x 32 * ND_TILE_RX outputs, stages each input plane they need once
//                 (rows and columns plus halo, boundary applied while staging) with every tap in
//                 shared memory, and each thread keeps ND_TILE_RX adjacent outputs per plane in
//                 registers, sliding a register window along runs of adjacent taps.
//   nd_sep2d      two 1-d passes along the last two axes fused into one pass over memory: a block
//                 stages an input tile plus both halos once, runs the first pass into a shared
//                 intermediate and the second into registers (separable filters of 2-d images
//                 and stacks of them).
#include "common.cuh"
#include "nd_boundary.cuh"

#if !defined(ND_THREADS) || !defined(ND_RX) || !defined(ND_RY) || !defined(ND_RY_WIDE) || \
    !defined(ND_MAX_DIMS) || !defined(ND_TILE_RX) || !defined(ND_TILE_ROWS) || !defined(ND_TILE_Z) || \
    !defined(ND_STAGE) || !defined(ND_SEP_RY)
#error "compile with the defines of cupyconv._ndimage.kernels.ND_CONSTANTS"
#endif

namespace nd {

// Complex numbers with the memory layout of NumPy's complex64/complex128.
template <typename R>
struct alignas(2 * sizeof(R)) complex {
  R re, im;
};

template <typename A> __device__ __forceinline__ A zero() { return A(0); }
template <> __device__ __forceinline__ complex<float> zero<complex<float> >() { return {0.f, 0.f}; }
template <> __device__ __forceinline__ complex<double> zero<complex<double> >() { return {0.0, 0.0}; }

// Storage -> compute type (real to real or complex, complex to complex).
template <typename A, typename T> struct load {
  static __device__ __forceinline__ A as(const T v) { return A(v); }
};
template <typename R, typename T> struct load<complex<R>, T> {
  static __device__ __forceinline__ complex<R> as(const T v) { return {R(v), R(0)}; }
};
template <typename R, typename S> struct load<complex<R>, complex<S> > {
  static __device__ __forceinline__ complex<R> as(const complex<S> v) { return {R(v.re), R(v.im)}; }
};

// A real compute value -> a real storage type.  Integer outputs get what SciPy's C cast `(T)v`
// of its double sums gives as GCC compiles it for x86-64 (SciPy's Linux wheels; the platform
// CuPy's tests hold SciPy's integer results on): truncation toward zero through x86's 32-bit
// conversion for signed types of up to 32 bits and unsigned ones of up to 16, its 64-bit one
// for uint32 and int64, and for uint64 the 64-bit one of v or, from 2^63 on, of v - 2^63 with
// the top bit flipped back.  A value out of the conversion's range, or NaN, gives x86's "integer
// indefinite" (the lowest value), of which narrower types keep the low bits.  So values that
// fit wrap modulo 2^bits (-3 -> 253 in uint8, 2^64 - 3 in uint64), as SciPy's passes do between
// them (sobel, prewitt), and uint64 keeps values from 2^63 up; GPU conversions saturate instead.
// (SciPy's N-d routine casts -v and negates for unsigned outputs: the same, but for uint64 below
// -2^63.)
__device__ __forceinline__ int x86_i32(const double v) {
  return (v > -2147483649.0 && v < 2147483648.0) ? int(v) : -2147483647 - 1;
}
__device__ __forceinline__ long long x86_i64(const double v) {
  return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (long long)v
                                                                      : -9223372036854775807LL - 1;
}
template <typename T> struct from_double {  // float, double
  static __device__ __forceinline__ T as(const double v) { return T(v); }
};
template <typename T> struct via_i32 {
  static __device__ __forceinline__ T as(const double v) { return T(x86_i32(v)); }
};
template <typename T> struct via_i64 {
  static __device__ __forceinline__ T as(const double v) { return T(x86_i64(v)); }
};
template <> struct from_double<signed char> : via_i32<signed char> {};
template <> struct from_double<unsigned char> : via_i32<unsigned char> {};
template <> struct from_double<short> : via_i32<short> {};
template <> struct from_double<unsigned short> : via_i32<unsigned short> {};
template <> struct from_double<int> : via_i32<int> {};
template <> struct from_double<unsigned int> : via_i64<unsigned int> {};
template <> struct from_double<long long> : via_i64<long long> {};
template <> struct from_double<unsigned long long> {
  static __device__ __forceinline__ unsigned long long as(const double v) {
    // (NaN fails the comparison: the 64-bit conversion of v, as on x86-64)
    return v >= 9223372036854775808.0
               ? (unsigned long long)x86_i64(v - 9223372036854775808.0) ^ (1ULL << 63)
               : (unsigned long long)x86_i64(v);
  }
};

// Compute -> storage type (a float compute value is exact as a double).
template <typename T, typename A> struct store {
  static __device__ __forceinline__ T as(const A v) { return from_double<T>::as(double(v)); }
};
template <typename S, typename A> struct store<complex<S>, A> {
  static __device__ __forceinline__ complex<S> as(const A v) { return {S(v), S(0)}; }
};
template <typename S, typename R> struct store<complex<S>, complex<R> > {
  static __device__ __forceinline__ complex<S> as(const complex<R> v) { return {S(v.re), S(v.im)}; }
};

template <typename A> __device__ __forceinline__ void madd(A& acc, const A a, const A b) { acc += a * b; }
// acc / d for the real divisor d (the real part of a complex one): uniform filters divide their
// integer-exact sums once, as SciPy does, instead of summing rounded 1 / size weights.
template <typename A> __device__ __forceinline__ A divide(const A acc, const A d) { return acc / d; }
template <typename R>
__device__ __forceinline__ complex<R> divide(const complex<R> acc, const complex<R> d) {
  return {acc.re / d.re, acc.im / d.re};
}
template <typename R>
__device__ __forceinline__ void madd(complex<R>& acc, const complex<R> a, const complex<R> b) {
  acc.re += a.re * b.re - a.im * b.im;
  acc.im += a.re * b.im + a.im * b.re;
}

// Rows per thread of nd_line_col: fewer for 16-byte compute types (registers, shared memory).
template <typename A> struct col_ry { static const int value = sizeof(A) <= 8 ? ND_RY : ND_RY_WIDE; };

}  // namespace nd

// prm: rows, n, K, left, mode.  Block: up to ND_THREADS threads (fewer warps for short rows).
// Grid: x over runs of blockDim.x * ND_RX outputs of a row, y over rows (grid-stride).  Shared memory: K weights, cval and divisor, then the run plus K halo values (one past the
// halo: the window's last step reads it and drops it).
template <typename Tin, typename Tout, typename A>
__global__ void __launch_bounds__(ND_THREADS)
nd_line_row(const Tin* __restrict__ x, const A* __restrict__ w, Tout* __restrict__ y,
            const long long* __restrict__ prm) {
  const nd::index_t rows = prm[0], n = prm[1];
  const int K = (int)prm[2], left = (int)prm[3], mode = (int)prm[4];
  const int NT = blockDim.x, L = NT * ND_RX, tid = threadIdx.x;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* ws = reinterpret_cast<A*>(smem_raw);
  A* tile = ws + K + 2;
  for (int i = tid; i < K + 2; i += NT) ws[i] = w[i];
  const nd::index_t start = (nd::index_t)blockIdx.x * L;
  for (nd::index_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const Tin* xr = x + row * n;
    __syncthreads();  // weights staged; the previous row's outputs have left the tile
    const A cval = ws[K];
    // ND_STAGE loads in flight per thread before any lands in the tile (a plain loop keeps
    // one: the mapping's branches stop the compiler from hoisting the next load)
    for (int i0 = tid; i0 < L + K - 1; i0 += NT * ND_STAGE) {
      A v[ND_STAGE];
#pragma unroll
      for (int u = 0; u < ND_STAGE; ++u) {
        const int i = i0 + u * NT;
        const nd::index_t j = i < L + K - 1 ? nd::map_index(start - left + i, n, mode) : -1;
        v[u] = j < 0 ? cval : nd::load<A, Tin>::as(xr[j]);
      }
#pragma unroll
      for (int u = 0; u < ND_STAGE; ++u)
        if (i0 + u * NT < L + K - 1) tile[i0 + u * NT] = v[u];
    }
    __syncthreads();
    A acc[ND_RX], win[ND_RX];
    const A* src = tile + tid * ND_RX;  // ND_RX is odd: lanes hit distinct banks
#pragma unroll
    for (int i = 0; i < ND_RX; ++i) {
      acc[i] = nd::zero<A>();
      win[i] = src[i];
    }
    for (int k = 0; k < K; ++k) {
      const A wk = ws[k];
#pragma unroll
      for (int i = 0; i < ND_RX; ++i) nd::madd(acc[i], win[i], wk);
#pragma unroll
      for (int i = 0; i < ND_RX - 1; ++i) win[i] = win[i + 1];
      win[ND_RX - 1] = src[k + ND_RX];  // the halo's last slot is read one step past the end
    }
    __syncthreads();  // every window is read: the tile takes the outputs
#pragma unroll
    for (int i = 0; i < ND_RX; ++i) tile[tid * ND_RX + i] = nd::divide(acc[i], ws[K + 1]);
    __syncthreads();
    Tout* yr = y + row * n;
    for (int i = tid; i < L; i += NT)
      if (start + i < n) yr[start + i] = nd::store<Tout, A>::as(tile[i]);
  }
}

// prm: outer, n, inner, K, left, mode, tiles_n (tiles of TN rows along n).  Block 32 x 8.
// Grid: x over tiles_n * ceil(inner / 32), y over outer (grid-stride).  Shared memory: K + 1
// weights, cval and divisor, then TN + K rows of 32 values (one
// past the halo: the window's last step reads it and drops it).
template <typename Tin, typename Tout, typename A>
__global__ void __launch_bounds__(256)
nd_line_col(const Tin* __restrict__ x, const A* __restrict__ w, Tout* __restrict__ y,
            const long long* __restrict__ prm) {
  const int RY = nd::col_ry<A>::value, TN = 8 * RY;
  const nd::index_t outer = prm[0], n = prm[1], inner = prm[2];
  const int K = (int)prm[3], left = (int)prm[4], mode = (int)prm[5];
  const nd::index_t tiles_n = prm[6];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* ws = reinterpret_cast<A*>(smem_raw);
  A* tile = ws + K + 2;
  for (int i = tid; i < K + 2; i += 256) ws[i] = w[i];
  const nd::index_t t_n = blockIdx.x % tiles_n, t_i = blockIdx.x / tiles_n;
  const nd::index_t row0 = t_n * TN, col = t_i * 32 + tx;
  const bool live = col < inner;
  for (nd::index_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const Tin* xo = x + o * n * inner;
    __syncthreads();
    const A cval = ws[K];
    for (int r0 = ty; r0 < TN + K - 1; r0 += 8 * ND_STAGE) {  // ND_STAGE loads in flight
      A v[ND_STAGE];
#pragma unroll
      for (int u = 0; u < ND_STAGE; ++u) {
        const int r = r0 + 8 * u;
        const nd::index_t j = r < TN + K - 1 ? nd::map_index(row0 - left + r, n, mode) : -1;
        v[u] = (j < 0 || !live) ? cval : nd::load<A, Tin>::as(xo[j * inner + col]);
      }
#pragma unroll
      for (int u = 0; u < ND_STAGE; ++u)
        if (r0 + 8 * u < TN + K - 1) tile[(r0 + 8 * u) * 32 + tx] = v[u];
    }
    __syncthreads();
    A acc[RY], win[RY];
    const A* src = tile + ty * RY * 32 + tx;
#pragma unroll
    for (int i = 0; i < RY; ++i) {
      acc[i] = nd::zero<A>();
      win[i] = src[i * 32];
    }
    for (int k = 0; k < K; ++k) {
      const A wk = ws[k];
#pragma unroll
      for (int i = 0; i < RY; ++i) nd::madd(acc[i], win[i], wk);
#pragma unroll
      for (int i = 0; i < RY - 1; ++i) win[i] = win[i + 1];
      win[RY - 1] = src[(k + RY) * 32];
    }
    if (live) {
      Tout* yo = y + o * n * inner;
#pragma unroll
      for (int i = 0; i < RY; ++i) {
        const nd::index_t r = row0 + ty * RY + i;
        if (r < n) yo[r * inner + col] = nd::store<Tout, A>::as(nd::divide(acc[i], ws[K + 1]));
      }
    }
  }
}

// prm: outer, n, inner, K, left, mode.  One output per thread (grid-stride over all outputs).
template <typename Tin, typename Tout, typename A>
__global__ void __launch_bounds__(ND_THREADS)
nd_line_direct(const Tin* __restrict__ x, const A* __restrict__ w, Tout* __restrict__ y,
               const long long* __restrict__ prm) {
  const nd::index_t outer = prm[0], n = prm[1], inner = prm[2];
  const int K = (int)prm[3], left = (int)prm[4], mode = (int)prm[5];
  const nd::index_t total = outer * n * inner;
  const A cval = w[K];
  for (nd::index_t idx = (nd::index_t)blockIdx.x * ND_THREADS + threadIdx.x; idx < total;
       idx += (nd::index_t)gridDim.x * ND_THREADS) {
    const nd::index_t c = idx % inner, r = (idx / inner) % n, o = idx / (inner * n);
    const Tin* xl = x + o * n * inner + c;
    A acc = nd::zero<A>();
    for (int k = 0; k < K; ++k) {
      const nd::index_t j = nd::map_index(r - left + k, n, mode);
      nd::madd(acc, j < 0 ? cval : nd::load<A, Tin>::as(xl[j * inner]), w[k]);
    }
    y[idx] = nd::store<Tout, A>::as(nd::divide(acc, w[K + 1]));
  }
}

// prm: ndim, total, mode, ntaps, shape[ndim], lo[ndim], hi[ndim], then per tap its linear offset
// and its ndim coordinate offsets (relative to the output coordinate).  lo/hi: the window's reach
// before and after the output coordinate per dim (interior test).  w: ntaps weights, cval, divisor.
template <typename Tin, typename Tout, typename A>
__global__ void __launch_bounds__(ND_THREADS)
nd_dense(const Tin* __restrict__ x, const A* __restrict__ w, Tout* __restrict__ y,
         const long long* __restrict__ prm) {
  const int ndim = (int)prm[0], mode = (int)prm[2], ntaps = (int)prm[3];
  const nd::index_t total = prm[1];
  const long long* shape = prm + 4;
  const long long* lo = shape + ndim;
  const long long* hi = lo + ndim;
  const long long* taps = hi + ndim;
  const int tap_len = ndim + 1;
  const A cval = w[ntaps];
  for (nd::index_t idx = (nd::index_t)blockIdx.x * ND_THREADS + threadIdx.x; idx < total;
       idx += (nd::index_t)gridDim.x * ND_THREADS) {
    nd::index_t coord[ND_MAX_DIMS];
    nd::index_t rest = idx;
    bool inside = true;
    for (int d = ndim - 1; d >= 0; --d) {
      coord[d] = rest % shape[d];
      rest /= shape[d];
      inside = inside && coord[d] >= lo[d] && coord[d] + hi[d] < shape[d];
    }
    A acc = nd::zero<A>();
    if (inside) {
      for (int t = 0; t < ntaps; ++t)
        nd::madd(acc, nd::load<A, Tin>::as(x[idx + taps[t * tap_len]]), w[t]);
    } else {
      for (int t = 0; t < ntaps; ++t) {
        const long long* off = taps + t * tap_len + 1;
        nd::index_t src = 0;
        for (int d = 0; d < ndim; ++d) {
          const nd::index_t j = nd::map_index(coord[d] + off[d], shape[d], mode);
          if (j < 0) {
            src = -1;
            break;
          }
          src = src * shape[d] + j;
        }
        nd::madd(acc, src < 0 ? cval : nd::load<A, Tin>::as(x[src]), w[t]);
      }
    }
    y[idx] = nd::store<Tout, A>::as(nd::divide(acc, w[ntaps + 1]));
  }
}

// prm: D0, D1, D2 (planes, rows, columns), mode, ntaps, PY, PX (staged rows and columns of a
// plane), lo_z, lo_y, lo_x (the taps' least offsets), SZ (planes one output reads), tiles_x,
// then SZ + 1 group starts (the taps with plane offset lo_z + k are [start[k], start[k+1]); the
// host lists taps by plane, row, column, as nd_dense sums them), then per tap its code:
//   code = ((dy - lo_y) * PX + (dx - lo_x)) * 2 + run,  run = 1 where the tap is the right
//   neighbour of the tap before it (same plane and row): the window slides by one value.
// TZ: output planes per block, 1 for 2-d arrays (4 planes of accumulators held 124 registers
// a thread, two blocks an SM) and ND_TILE_Z for 3-d ones.
// Block 32 x ND_TILE_ROWS.  Grid: x over tiles_x * ceil(D1 / ND_TILE_ROWS) tiles of a plane, y
// over groups of TZ planes (grid-stride).  Shared memory: the staged plane (PY * PX),
// the weights, the codes (int), the row and column maps (PY + PX ints).  Sums run over the same taps in the same order as nd_dense's.
template <typename Tin, typename Tout, typename A, int TZ>
__global__ void __launch_bounds__(32 * ND_TILE_ROWS, TZ == 1 ? 4 : 2)
nd_dense_tile(const Tin* __restrict__ x, const A* __restrict__ w, Tout* __restrict__ y,
              const long long* __restrict__ prm) {
  const int RX = ND_TILE_RX, TY = ND_TILE_ROWS, TX = 32 * ND_TILE_RX;
  const int NT = 32 * ND_TILE_ROWS;
  const nd::index_t D0 = prm[0], D1 = prm[1], D2 = prm[2];
  const int mode = (int)prm[3], ntaps = (int)prm[4], PY = (int)prm[5], PX = (int)prm[6];
  const int lo_z = (int)prm[7], lo_y = (int)prm[8], lo_x = (int)prm[9], SZ = (int)prm[10];
  const nd::index_t tiles_x = prm[11];
  const long long* starts = prm + 12;
  const long long* codes = starts + SZ + 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* tile = reinterpret_cast<A*>(smem_raw);
  A* ws = tile + PY * PX;
  int* cs = reinterpret_cast<int*>(ws + ntaps);
  int* rmap = cs + ntaps;  // the staged rows' and columns' indices in x (-1: cval), mapped once
  int* cmap = rmap + PY;   // per block: every plane stages the same rows and columns
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  for (int t = tid; t < ntaps; t += NT) {
    ws[t] = w[t];
    cs[t] = (int)codes[t];
  }
  const A cval = w[ntaps], divisor = w[ntaps + 1];
  const nd::index_t x0 = (blockIdx.x % tiles_x) * TX, y0 = (blockIdx.x / tiles_x) * TY;
  for (int i = tid; i < PY; i += NT) rmap[i] = (int)nd::map_index(y0 + lo_y + i, D1, mode);
  for (int i = tid; i < PX; i += NT) cmap[i] = (int)nd::map_index(x0 + lo_x + i, D2, mode);
  const int base = ty * PX + tx * RX;  // RX is odd: lanes hit distinct banks
  for (nd::index_t z0 = (nd::index_t)blockIdx.y * TZ; z0 < D0; z0 += (nd::index_t)gridDim.y * TZ) {
    const int last = (int)(D0 - 1 - z0 < TZ - 1 ? D0 - 1 - z0 : TZ - 1);  // last live plane
    A acc[TZ][RX];
#pragma unroll
    for (int j = 0; j < TZ; ++j)
#pragma unroll
      for (int i = 0; i < RX; ++i) acc[j][i] = nd::zero<A>();
    // input plane z0 + lo_z + p feeds output plane z0 + j through the taps of group p - j
    for (int p = 0; p < TZ + SZ - 1; ++p) {
      const int jlo = p - SZ + 1 > 0 ? p - SZ + 1 : 0, jhi = p < last ? p : last;
      if (jlo > jhi) continue;  // no live output plane reads this one
      const nd::index_t zz = nd::map_index(z0 + lo_z + p, D0, mode);
      __syncthreads();  // the tile's previous plane (or outputs) is read (and the maps written)
      // Thread rows walk the staged rows, lanes the columns, ND_STAGE loads in flight: indices
      // come from the maps (no division, no boundary arithmetic per element).
      for (int py = ty; py < PY; py += TY) {
        const int r = rmap[py];
        const bool live = zz >= 0 && r >= 0;
        const Tin* row = x + (live ? (zz * D1 + r) * D2 : 0);
        for (int px0 = tx; px0 < PX; px0 += 32 * ND_STAGE) {
          A v[ND_STAGE];
#pragma unroll
          for (int u = 0; u < ND_STAGE; ++u) {
            const int px = px0 + u * 32;
            const int c = px < PX ? cmap[px] : -1;
            v[u] = (live && c >= 0) ? nd::load<A, Tin>::as(row[c]) : cval;
          }
#pragma unroll
          for (int u = 0; u < ND_STAGE; ++u)
            if (px0 + u * 32 < PX) tile[py * PX + px0 + u * 32] = v[u];
        }
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < TZ; ++j) {
        if (j < jlo || j > jhi) continue;
        const int t1 = (int)starts[p - j + 1];
        A win[RX];
#pragma unroll
        for (int i = 0; i < RX; ++i) win[i] = nd::zero<A>();
        for (int t = (int)starts[p - j]; t < t1; ++t) {
          const int code = cs[t];
          const A* src = tile + base + (code >> 1);
          if (code & 1) {
#pragma unroll
            for (int i = 0; i < RX - 1; ++i) win[i] = win[i + 1];
            win[RX - 1] = src[RX - 1];
          } else {
#pragma unroll
            for (int i = 0; i < RX; ++i) win[i] = src[i];
          }
          const A wt = ws[t];
#pragma unroll
          for (int i = 0; i < RX; ++i) nd::madd(acc[j][i], win[i], wt);
        }
      }
    }
    // the outputs leave through the tile as coalesced rows (PY * PX >= TY * TX)
#pragma unroll
    for (int j = 0; j < TZ; ++j) {
      if (j > last) break;
      __syncthreads();
#pragma unroll
      for (int i = 0; i < RX; ++i) tile[ty * TX + tx * RX + i] = nd::divide(acc[j][i], divisor);
      __syncthreads();
      Tout* yp = y + (z0 + j) * D1 * D2;
      for (int i = tid; i < TY * TX; i += NT) {
        const nd::index_t r = y0 + i / TX, c = x0 + i % TX;
        if (r < D1 && c < D2) yp[r * D2 + c] = nd::store<Tout, A>::as(tile[i]);
      }
    }
  }
}

// Two 1-d passes fused: the last two axes of an array seen as (planes, H, W), the first pass
// along one of them and the second along the other, in the order the host's chain runs them
// (x_first: along W first).  The order matters only in mode "constant": the second pass pads
// the *intermediate* with cval, so an intermediate value whose row (x first) or column (y first)
// lies outside the array is cval, not a filtered run of cvals.  The intermediate stays in shared
// memory in the compute type A: the host fuses only where the two-pass path's intermediate cast
// to the output type is exact (output type == compute type), so both compute the same sums.
//
// prm: planes, H, W, Kx, Ky, lx, ly, mode_x, mode_y, x_first, tiles_x (tiles of 32 columns).
// w: Kx taps along W, Ky taps along H, cval, divisor of the W pass, divisor of the H pass.
// Block 32 x 8 threads, a tile of TY = 8 * ND_SEP_RY rows by TX = 32 columns of outputs; the host
// guarantees H * W < 2^31 (32-bit index math inside a plane; the plane offset is 64-bit).
// Grid: x over the tiles of a plane, y over planes (grid-stride).
// Shared memory: Kx + Ky + 3 weights, the staged input (PY + 1) x PX, PY = TY + Ky - 1,
// PX = TX + Kx - 1 (one row past the halo: the sliding window's last step reads it and drops
// it), then the intermediate: (PY + 1) x TX (x first) or TY x PX (y first).
template <typename Tin, typename Tout, typename A>
__global__ void __launch_bounds__(256)
nd_sep2d(const Tin* __restrict__ x, const A* __restrict__ w, Tout* __restrict__ y,
         const long long* __restrict__ prm) {
  const int RY = ND_SEP_RY, TY = 8 * ND_SEP_RY, TX = 32, U = 4;  // U: loads in flight per thread
  const nd::index_t planes = prm[0];
  const int H = (int)prm[1], W = (int)prm[2], Kx = (int)prm[3], Ky = (int)prm[4];
  const int lx = (int)prm[5], ly = (int)prm[6], mode_x = (int)prm[7], mode_y = (int)prm[8];
  const bool x_first = prm[9] != 0;
  const int tiles_x = (int)prm[10];
  const int PY = TY + Ky - 1, PX = TX + Kx - 1;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* ws = reinterpret_cast<A*>(smem_raw);
  A* tile = ws + Kx + Ky + 3;
  A* mid = tile + (PY + 1) * PX;
  for (int i = tid; i < Kx + Ky + 3; i += 256) ws[i] = w[i];
  const A* wx = ws;
  const A* wy = ws + Kx;
  const int col0 = (int)(blockIdx.x % tiles_x) * TX, row0 = (int)(blockIdx.x / tiles_x) * TY;
  const int r_in = row0 - ly, c_in = col0 - lx;  // the staged tile's first input row and column
  // the whole halo inside the plane: no boundary mapping (checked once per tile)
  const bool inside = r_in >= 0 && r_in + PY <= H && c_in >= 0 && c_in + PX <= W;
  for (nd::index_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const Tin* xp = x + p * ((nd::index_t)H * W);
    __syncthreads();  // weights staged; the previous plane's tiles are read
    const A cval = ws[Kx + Ky];
    // stage (PY x PX), U rows per thread loaded before any is stored
    for (int c = tx; c < PX; c += 32) {
      int cm = c_in + c;
      if (!inside) cm = (int)nd::map_index(cm, W, mode_x);
      for (int r0 = ty; r0 < PY; r0 += 8 * U) {
        A v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int r = r0 + 8 * u;
          v[u] = cval;
          if (r < PY) {
            if (inside) {
              v[u] = nd::load<A, Tin>::as(xp[(r_in + r) * W + cm]);
            } else {
              const int rm = (int)nd::map_index(r_in + r, H, mode_y);
              if (rm >= 0 && cm >= 0) v[u] = nd::load<A, Tin>::as(xp[rm * W + cm]);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (r0 + 8 * u < PY) tile[(r0 + 8 * u) * PX + c] = v[u];
      }
    }
    __syncthreads();
    A acc[ND_SEP_RY];
#pragma unroll
    for (int i = 0; i < RY; ++i) acc[i] = nd::zero<A>();
    if (x_first) {
      // mid[r][c] = the W pass at staged row r; cval on rows outside the array in mode constant
      const A dx = ws[Kx + Ky + 1];
      for (int r = ty; r < PY; r += 8) {
        A s = nd::zero<A>();
        const A* src = tile + r * PX + tx;
        for (int k = 0; k < Kx; ++k) nd::madd(s, src[k], wx[k]);
        const bool pad = mode_y == ND_CONSTANT && (r_in + r < 0 || r_in + r >= H);
        mid[r * TX + tx] = pad ? cval : nd::divide(s, dx);
      }
      __syncthreads();
      // the H pass down column tx: a register window slides over RY rows
      A win[ND_SEP_RY];
      const A* src = mid + ty * RY * TX + tx;
#pragma unroll
      for (int i = 0; i < RY; ++i) win[i] = src[i * TX];
      for (int k = 0; k < Ky; ++k) {
        const A wk = wy[k];
#pragma unroll
        for (int i = 0; i < RY; ++i) nd::madd(acc[i], win[i], wk);
#pragma unroll
        for (int i = 0; i < RY - 1; ++i) win[i] = win[i + 1];
        win[RY - 1] = src[(k + RY) * TX];  // one row past the halo on the last step
      }
      const A dy = ws[Kx + Ky + 2];
#pragma unroll
      for (int i = 0; i < RY; ++i) acc[i] = nd::divide(acc[i], dy);
    } else {
      // mid[r][c] = the H pass at staged column c; cval on columns outside in mode constant
      const A dy = ws[Kx + Ky + 2];
      for (int c = tx; c < PX; c += 32) {
        const bool pad = mode_x == ND_CONSTANT && (c_in + c < 0 || c_in + c >= W);
        A win[ND_SEP_RY], s[ND_SEP_RY];
        const A* src = tile + ty * RY * PX + c;
#pragma unroll
        for (int i = 0; i < RY; ++i) {
          s[i] = nd::zero<A>();
          win[i] = src[i * PX];
        }
        for (int k = 0; k < Ky; ++k) {
          const A wk = wy[k];
#pragma unroll
          for (int i = 0; i < RY; ++i) nd::madd(s[i], win[i], wk);
#pragma unroll
          for (int i = 0; i < RY - 1; ++i) win[i] = win[i + 1];
          win[RY - 1] = src[(k + RY) * PX];  // one row past the halo on the last step
        }
#pragma unroll
        for (int i = 0; i < RY; ++i) mid[(ty * RY + i) * PX + c] = pad ? cval : nd::divide(s[i], dy);
      }
      __syncthreads();
      const A dx = ws[Kx + Ky + 1];
#pragma unroll
      for (int i = 0; i < RY; ++i) {
        const A* src = mid + (ty * RY + i) * PX + tx;
        for (int k = 0; k < Kx; ++k) nd::madd(acc[i], src[k], wx[k]);
        acc[i] = nd::divide(acc[i], dx);
      }
    }
    // lanes write 32 adjacent columns of a row: coalesced
    Tout* yp = y + p * ((nd::index_t)H * W);
    const int c = col0 + tx;
    if (c < W) {
#pragma unroll
      for (int i = 0; i < RY; ++i) {
        const int r = row0 + ty * RY + i;
        if (r < H) yp[r * W + c] = nd::store<Tout, A>::as(acc[i]);
      }
    }
  }
}
