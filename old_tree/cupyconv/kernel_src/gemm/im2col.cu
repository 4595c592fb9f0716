// Explicit im2col: the convolution's input view written out as a matrix, zeros where padding.
//
// Channels-first: col[n, (c, kd, kh, kw), (od, oh, ow)], so y[n] = w.reshape(K, -1) @ col[n].
// Channels-last:  col[n, (od, oh, ow), (g, kd, kh, kw, cg)], so y[n] = col[n] @ w.reshape(K, -1).T
// for groups == 1; with groups each group's columns are contiguous, one GEMM operand per group.
// One thread per col element, numbered in col's memory order (coalesced writes); x is read
// through run-time element strides (any layout, non-contiguous views), spatial dims padded to 3.
#include "common.cuh"

template <typename T>
__global__ void im2col(const T* __restrict__ x, T* __restrict__ col,
                       int N, int C, int groups, int D, int H, int W, int OD, int OH, int OW,
                       int KD, int KH, int KW, int SD, int SH, int SW,
                       int DD, int DH, int DW, int PD, int PH, int PW,
                       cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw,
                       int channels_last) {
  const cc::index_t total = (cc::index_t)N * C * KD * KH * KW * OD * OH * OW;
  const bool narrow = total <= 0xffffffffLL;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    cc::index_t r = idx;  // decomposed in place by divmod
    int n, c, kd, kh, kw, od, oh, ow;
    if (channels_last) {
      const int cpg = C / groups;
      c = cc::divmod(r, cpg, narrow);
      kw = cc::divmod(r, KW, narrow);
      kh = cc::divmod(r, KH, narrow);
      kd = cc::divmod(r, KD, narrow);
      c += cc::divmod(r, groups, narrow) * cpg;
      ow = cc::divmod(r, OW, narrow);
      oh = cc::divmod(r, OH, narrow);
      od = cc::divmod(r, OD, narrow); n = (int)r;
    } else {
      ow = cc::divmod(r, OW, narrow);
      oh = cc::divmod(r, OH, narrow);
      od = cc::divmod(r, OD, narrow);
      kw = cc::divmod(r, KW, narrow);
      kh = cc::divmod(r, KH, narrow);
      kd = cc::divmod(r, KD, narrow);
      c = cc::divmod(r, C, narrow); n = (int)r;
    }
    const int id = od * SD - PD + kd * DD;
    const int ih = oh * SH - PH + kh * DH;
    const int iw = ow * SW - PW + kw * DW;
    T v = cc::store_as<T>(0.0f);
    if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W) {
      v = x[n * xsn + c * xsc + id * xsd + ih * xsh + iw * xsw];
    }
    col[idx] = v;
  }
}
