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

// The adjoint of im2col_rows (im2col.cu) from fp32 columns: x[n, d, h, w, c] (channels-last,
// C-contiguous) = the sum, in tap order, of col[p, (kd, kh, kw, c)] over the output pixels p
// whose window holds it, col in rows of `ld` floats.  Backward-data of few-channel layers
// (dcol = dy @ w in fp32 on the TMA GEMM, then this): one rounding per x element, as a direct
// backward-data makes.  Per dim the taps that reach a row are every Q-th from the first, Q =
// stride / gcd(stride, dilation) (QD, QH, QW), and from one to the next the output index falls
// by Q * dilation / stride exactly (the lcm over the stride): one division per dim, none per tap.
struct TapWalk {
  int k0;    // the first tap that lands on an output (KERNEL: none does)
  int o0;    // its output index (may be negative or past the output: skipped)
  int step;  // how far the output index falls per reaching tap
};

__device__ __forceinline__ TapWalk first_tap(int pos, int K, int S, int Dl, int Q) {
  int k0 = 0;
  while (k0 < K && k0 < Q && (pos - k0 * Dl) % S) ++k0;
  if (k0 >= Q) k0 = K;  // (no tap of the first period lands on a multiple of the stride)
  return {k0, (pos - k0 * Dl) / S, Q * Dl / S};
}

// One thread per input pixel, its channels in groups of COL2IM_ROWS_CHANNELS held in registers:
// the tap walk's divisions are made once per pixel, not once per element (per element, they
// made cnx's 4x4 stride-4 stem's 4.8M elements take 119 us over 19 MB of columns, H200).
constexpr int COL2IM_ROWS_CHANNELS = 8;

template <typename T>
__global__ void col2im_rows(const float* __restrict__ col, T* __restrict__ x,
                            int N, int C, int D, int H, int W, int OD, int OH, int OW,
                            int KD, int KH, int KW, int SD, int SH, int SW,
                            int DD, int DH, int DW, int PD, int PH, int PW,
                            int QD, int QH, int QW, long long ld) {
  constexpr int CG = COL2IM_ROWS_CHANNELS;
  const cc::index_t total = (cc::index_t)N * D * H * W;
  const bool narrow = total <= 0xffffffffLL;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    cc::index_t r = idx;
    const int w = cc::divmod(r, W, narrow);
    const int h = cc::divmod(r, H, narrow);
    const int d = cc::divmod(r, D, narrow);
    const cc::index_t n = r;
    const TapWalk td = first_tap(d + PD, KD, SD, DD, QD);
    const TapWalk th = first_tap(h + PH, KH, SH, DH, QH);
    const TapWalk tw = first_tap(w + PW, KW, SW, DW, QW);
    T* out = x + idx * C;
    for (int c0 = 0; c0 < C; c0 += CG) {
      float acc[CG];
#pragma unroll
      for (int i = 0; i < CG; ++i) acc[i] = 0.0f;
      // (output indices fall tap by tap: past the output, skip; below zero, every later tap is)
      for (int kd = td.k0, od = td.o0; kd < KD && od >= 0; kd += QD, od -= td.step) {
        if (od >= OD) continue;
        for (int kh = th.k0, oh = th.o0; kh < KH && oh >= 0; kh += QH, oh -= th.step) {
          if (oh >= OH) continue;
          const cc::index_t row = ((n * OD + od) * OH + oh) * OW;
          const int t0 = (kd * KH + kh) * KW;
          for (int kw = tw.k0, ow = tw.o0; kw < KW && ow >= 0; kw += QW, ow -= tw.step) {
            if (ow >= OW) continue;
            const float* src = col + (row + ow) * ld + (cc::index_t)(t0 + kw) * C + c0;
#pragma unroll
            for (int i = 0; i < CG; ++i) {
              if (c0 + i < C) acc[i] += src[i];
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < CG; ++i) {
        if (c0 + i < C) out[c0 + i] = cc::store_as<T>(acc[i]);
      }
    }
  }
}
