// Depthwise forward convolution (groups == input channels, K = multiplier * C): bandwidth-bound,
// so the kernels are built around bytes, not FLOPs.
//
// Channels-first: one block per (image, output channel, output depth) plane and 32x8 output tile.
// The input tile with its halo is staged in shared memory once per depth tap (coalesced rows, zeros
// for padding), then every thread reads its window from there: each input element is fetched from
// global memory about once per output channel instead of once per tap.
// Channels-last: neighbouring threads own neighbouring channels of one output pixel, so every tap
// is one coalesced read across channels; reuse between taps comes from L1/L2.
#include "common.cuh"

#define DW_TW 32
#define DW_TH 8

template <typename T>
__global__ void __launch_bounds__(DW_TW * DW_TH)
depthwise_fwd_nchw(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   T* __restrict__ y, int has_bias, int K, int mult,
                   int D, int H, int W, int OD, int OH, int OW, int KD, int KH, int KW,
                   int SD, int SH, int SW, int DD, int DH, int DW, int PD, int PH, int PW,
                   cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh,
                   cc::index_t xsw, int tiles_w) {
  typedef typename cc::acc_type<T>::type A;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* tile = reinterpret_cast<A*>(smem_raw);
  const int plane = blockIdx.x;                       // (n, k, od)
  const int od = plane % OD, k = (plane / OD) % K, n = plane / (OD * K);
  const int oh0 = (blockIdx.y / tiles_w) * DW_TH, ow0 = (blockIdx.y % tiles_w) * DW_TW;
  const int tx = threadIdx.x % DW_TW, ty = threadIdx.x / DW_TW;
  const int rows = (DW_TH - 1) * SH + (KH - 1) * DH + 1, cols = (DW_TW - 1) * SW + (KW - 1) * DW + 1;
  const int ih0 = oh0 * SH - PH, iw0 = ow0 * SW - PW;
  const T* xp = x + n * xsn + (cc::index_t)(k / mult) * xsc;
  const T* wk = w + (cc::index_t)k * KD * KH * KW;
  A acc = A(0);
  for (int kd = 0; kd < KD; ++kd) {
    const int id = od * SD - PD + kd * DD;
    if (id < 0 || id >= D) continue;                  // uniform across the block
    __syncthreads();                                  // the previous depth's tile is consumed
    for (int i = threadIdx.x; i < rows * cols; i += DW_TW * DW_TH) {
      const int r = i / cols, c = i - r * cols;
      const int ih = ih0 + r, iw = iw0 + c;
      tile[i] = ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                    ? cc::load_as<A>(xp[id * xsd + ih * xsh + iw * xsw]) : A(0);
    }
    __syncthreads();
    const A* src = tile + ty * SH * cols + tx * SW;
    const T* wt = wk + kd * KH * KW;
    for (int kh = 0; kh < KH; ++kh)
      for (int kw = 0; kw < KW; ++kw)
        acc += src[kh * DH * cols + kw * DW] * cc::load_as<A>(wt[kh * KW + kw]);
  }
  const int oh = oh0 + ty, ow = ow0 + tx;
  if (oh < OH && ow < OW) {
    if (has_bias) acc += cc::load_as<A>(bias[k]);
    y[(((cc::index_t)n * K + k) * OD + od) * OH * OW + (cc::index_t)oh * OW + ow] = cc::store_as<T>(acc);
  }
}

template <typename T>
__global__ void depthwise_fwd_nhwc(const T* __restrict__ x, const T* __restrict__ w,
                                   const T* __restrict__ bias, T* __restrict__ y, int has_bias,
                                   int N, int K, int mult,
                                   int D, int H, int W, int OD, int OH, int OW, int KD, int KH, int KW,
                                   int SD, int SH, int SW, int DD, int DH, int DW, int PD, int PH, int PW,
                                   cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh,
                                   cc::index_t xsw) {
  typedef typename cc::acc_type<T>::type A;
  const cc::index_t total = (cc::index_t)N * OD * OH * OW * K;
  const bool narrow = total <= 0xffffffffLL;
  const int taps = KD * KH * KW;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    int n, k, od, oh, ow;
    cc::split_activation(idx, K, OD, OH, OW, true, narrow, n, k, od, oh, ow);
    const T* xp = x + n * xsn + (cc::index_t)(k / mult) * xsc;
    const T* wk = w + (cc::index_t)k * taps;
    A acc = has_bias ? cc::load_as<A>(bias[k]) : A(0);
    for (int kd = 0; kd < KD; ++kd) {
      const int id = od * SD - PD + kd * DD;
      if ((unsigned)id >= (unsigned)D) continue;
      for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PH + kh * DH;
        if ((unsigned)ih >= (unsigned)H) continue;
        for (int kw = 0; kw < KW; ++kw) {
          const int iw = ow * SW - PW + kw * DW;
          if ((unsigned)iw >= (unsigned)W) continue;
          acc += cc::load_as<A>(xp[id * xsd + ih * xsh + iw * xsw]) *
                 cc::load_as<A>(wk[(kd * KH + kh) * KW + kw]);
        }
      }
    }
    y[idx] = cc::store_as<T>(acc);
  }
}
