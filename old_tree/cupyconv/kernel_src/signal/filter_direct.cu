// Direct N-d correlation for the signal API (single-channel filtering, optionally batched).
//
//   y[p, od, oh, ow] = sum_{kd,kh,kw} X(p, od - PD + kd, oh - PH + kh, ow - PW + kw) * g[p, kd, kh, kw]
//
// where X reads the input through the boundary mode (fill value, wrap or symmetric reflection).
// Convolution, complex conjugation and SciPy's mode/alignment rules are all folded into `g` and
// the pads by the host (cupyconv/_signal_plan.py); the kernel only correlates.
//
// One block computes a tile of TY rows x (TX * RX) columns of one output plane.  The input tile plus
// its halo and the matching block of filter taps are staged in shared memory once per pass; the
// boundary mode is applied while staging (per loaded element, never per tap).  Each thread keeps RX
// horizontally adjacent outputs in registers and slides a register window of RX + KWC - 1 inputs
// along each filter row, so every shared-memory read feeds up to KWC multiply-adds.  RX is odd so
// that lanes reading `tx * RX + i` hit distinct banks.  KWC (a template argument: 4, 8, 16 or 32)
// bounds the filter columns per pass; wider filters, filter rows that do not fit in shared memory
// (KHC per pass) and depth taps are processed in several passes over the same tile.
#include "common.cuh"
#include "boundary.cuh"

namespace cc {

// Complex numbers with the memory layout of numpy/cupy complex64/complex128.
template <typename R>
struct alignas(2 * sizeof(R)) complex {
  R re, im;
};

// (cc::zero, from common.cuh, for the complex types)
template <> __device__ __forceinline__ complex<float> zero<complex<float> >() { return {0.f, 0.f}; }
template <> __device__ __forceinline__ complex<double> zero<complex<double> >() { return {0.0, 0.0}; }

// acc += a * b.  Unsigned integers wrap modulo 2^64, which is exactly what integer inputs need: the
// host casts to uint64 and back, and the low bits match any narrower two's-complement type.
template <typename T> __device__ __forceinline__ void madd(T& acc, const T a, const T b) { acc += a * b; }
template <typename R> __device__ __forceinline__ void madd(complex<R>& acc, const complex<R> a,
                                                           const complex<R> b) {
  acc.re += a.re * b.re - a.im * b.im;
  acc.im += a.re * b.im + a.im * b.re;
}

// Real part type of each compute type, and a value built from (re, im): the fill value travels as
// two plain scalars, so no struct is passed by value (its alignment differs between launch APIs).
template <typename T> struct real_of { typedef T type; };
template <typename R> struct real_of<complex<R> > { typedef R type; };
template <typename T> struct value_of {
  static __device__ __forceinline__ T make(const T re, const T) { return re; }
};
template <typename R> struct value_of<complex<R> > {
  static __device__ __forceinline__ complex<R> make(const R re, const R im) { return {re, im}; }
};

// Outputs per thread: odd (bank-conflict free), fewer for wide types to bound registers.
// (KERNEL_CONSTANTS: FD_RX_NARROW, FD_RX_MEDIUM, FD_RX_WIDE)
#if !defined(FD_THREADS) || !defined(FD_RX_NARROW) || !defined(FD_RX_MEDIUM) || !defined(FD_RX_WIDE)
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
template <typename T> struct filter_rx {
  static const int value = sizeof(T) <= 4 ? FD_RX_NARROW
                                          : (sizeof(T) <= 8 ? FD_RX_MEDIUM : FD_RX_WIDE);
};

}  // namespace cc

template <typename T, int KWC>
__global__ void __launch_bounds__(FD_THREADS)
filter_direct(const T* __restrict__ x, const T* __restrict__ g,
              const typename cc::real_of<T>::type fill_re, const typename cc::real_of<T>::type fill_im,
              T* __restrict__ y, int planes, int OD, int OH, int OW, int D, int H, int W,
              int KD, int KH, int KW, int PD, int PH, int PW, int boundary,
              cc::index_t xsb, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw, cc::index_t gsb,
              int KHC, int tiles_w) {
  const int RX = cc::filter_rx<T>::value;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int TX = blockDim.x, TY = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx, nthreads = TX * TY;
  const int TWO = TX * RX;                            // output columns of the tile
  const int cols = TWO + KWC - 1;                     // staged input columns
  T* tile = reinterpret_cast<T*>(smem_raw);           // (TY + KHC - 1) x cols
  T* taps = tile + (TY + KHC - 1) * cols;             // KHC x KWC
  const int oh0 = (blockIdx.x / tiles_w) * TY, ow0 = (blockIdx.x % tiles_w) * TWO;
  const T fv = cc::value_of<T>::make(fill_re, fill_im);

  for (int plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int b = plane / OD, od = plane - b * OD;
    const T* xb = x + b * xsb;
    const T* gb = g + b * gsb;
    T acc[RX];
#pragma unroll
    for (int i = 0; i < RX; ++i) acc[i] = cc::zero<T>();

    for (int kd = 0; kd < KD; ++kd) {
      const int id = cc::boundary_index(od - PD + kd, D, boundary);
      for (int kh0 = 0; kh0 < KH; kh0 += KHC) {
        const int khn = min(KHC, KH - kh0), rows = TY + khn - 1;
        for (int kw0 = 0; kw0 < KW; kw0 += KWC) {
          const int kwn = min(KWC, KW - kw0);
          __syncthreads();                            // the previous pass is consumed
          for (int i = tid; i < rows * cols; i += nthreads) {
            const int r = i / cols, c = i - r * cols;
            const int ih = cc::boundary_index(oh0 - PH + kh0 + r, H, boundary);
            const int iw = cc::boundary_index(ow0 - PW + kw0 + c, W, boundary);
            tile[i] = (id < 0 || ih < 0 || iw < 0) ? fv : xb[id * xsd + ih * xsh + iw * xsw];
          }
          for (int i = tid; i < khn * KWC; i += nthreads) {
            const int r = i / KWC, c = i - r * KWC;
            taps[i] = c < kwn ? gb[((cc::index_t)kd * KH + kh0 + r) * KW + kw0 + c] : cc::zero<T>();
          }
          __syncthreads();
          const T* src = tile + ty * cols + tx * RX;
          for (int kh = 0; kh < khn; ++kh) {
            T win[RX + KWC - 1];
#pragma unroll
            for (int i = 0; i < RX + KWC - 1; ++i) win[i] = src[kh * cols + i];
#pragma unroll
            for (int kw = 0; kw < KWC; ++kw) {
              if (kw < kwn) {                         // uniform: skips the bucket's unused taps
                const T f = taps[kh * KWC + kw];
#pragma unroll
                for (int i = 0; i < RX; ++i) cc::madd(acc[i], win[i + kw], f);
              }
            }
          }
        }
      }
    }
    // Stage the tile's outputs in shared memory so the global stores are coalesced rows.
    __syncthreads();
#pragma unroll
    for (int i = 0; i < RX; ++i) tile[ty * TWO + tx * RX + i] = acc[i];
    __syncthreads();
    T* yp = y + (cc::index_t)plane * OH * OW;
    for (int i = tid; i < TY * TWO; i += nthreads) {
      const int r = i / TWO, c = i - r * TWO;
      const int oh = oh0 + r, ow = ow0 + c;
      if (oh < OH && ow < OW) yp[(cc::index_t)oh * OW + ow] = tile[i];
    }
  }
}
