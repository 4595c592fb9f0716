// col2im, the adjoint of im2col: x[n, c, h] = sum over the (tap, p) with h = p * s - pad + t * d of
// col[n, (c, t), p] (channels-first) or col[n, p, (t, c)] (channels-last).  Gather form: one
// thread per x element sums its taps in a fixed order, so the result is deterministic and needs
// no atomics.  x is written contiguous in its layout; spatial dims padded in front to three.
#include "common.cuh"

template <typename T>
__global__ void col2im(const T* __restrict__ col, T* __restrict__ x,
                       int N, int C, int D, int H, int W, int OD, int OH, int OW,
                       int KD, int KH, int KW, int SD, int SH, int SW,
                       int DD, int DH, int DW, int PD, int PH, int PW, int channels_last) {
  typedef typename cc::acc_type<T>::type A;
  const cc::index_t total = (cc::index_t)N * C * D * H * W;
  const cc::index_t L = (cc::index_t)OD * OH * OW, taps = (cc::index_t)KD * KH * KW;
  const bool narrow = total <= 0xffffffffLL;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    int n, c, d, h, w;
    cc::split_activation(idx, C, D, H, W, channels_last, narrow, n, c, d, h, w);
    A acc = A(0);
    for (int kd = 0; kd < KD; ++kd) {
      const int pd = d + PD - kd * DD;
      if (pd < 0 || pd % SD || pd / SD >= OD) continue;
      for (int kh = 0; kh < KH; ++kh) {
        const int ph = h + PH - kh * DH;
        if (ph < 0 || ph % SH || ph / SH >= OH) continue;
        for (int kw = 0; kw < KW; ++kw) {
          const int pw = w + PW - kw * DW;
          if (pw < 0 || pw % SW || pw / SW >= OW) continue;
          const cc::index_t p = ((cc::index_t)(pd / SD) * OH + ph / SH) * OW + pw / SW;
          const cc::index_t t = ((cc::index_t)kd * KH + kh) * KW + kw;
          const cc::index_t off = channels_last ? ((cc::index_t)n * L + p) * taps * C + t * C + c
                                                : (((cc::index_t)n * C + c) * taps + t) * L + p;
          acc += cc::load_as<A>(col[off]);
        }
      }
    }
    x[idx] = cc::store_as<T>(acc);
  }
}
