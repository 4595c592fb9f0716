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

// Channels-last im2col into rows of `ld` elements (a multiple of 16 / sizeof(T), so every row
// starts 16-byte aligned for TMA): col[p, (kd, kh, kw, c)] for output pixel p, the columns past
// the taps x C real ones written as zeros.  For layers whose C is not a whole 16-byte chunk (the
// 3-channel stems), whose column matrix then feeds the TMA GEMM directly.  One thread per 16
// bytes of a row: a shared table gives each column's tap offsets and channel, so no thread
// divides per element.  ld <= IM2COL_ROWS_MAX (the host checks).  The table is stored
// element-major (entry i of chunk q at i * chunks + q), so the neighbouring chunks a warp's
// threads take read neighbouring entries: chunk-major, their 16-byte entries 128 bytes apart
// fell on the same banks (8-way conflicts; 269 us for ResNet-50's stem at batch 32, H200).
constexpr int IM2COL_ROWS_MAX = 1024;

template <typename T>
__global__ void im2col_rows(const T* __restrict__ x, T* __restrict__ col,
                            int N, int C, int D, int H, int W, int OD, int OH, int OW,
                            int KD, int KH, int KW, int SD, int SH, int SW,
                            int DD, int DH, int DW, int PD, int PH, int PW,
                            cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh,
                            cc::index_t xsw, int ld) {
  constexpr int VEC = 16 / sizeof(T);
  __shared__ int4 table[IM2COL_ROWS_MAX];  // (kd * DD, kh * DH, kw * DW, c); c < 0: a zero column
  const int real = KD * KH * KW * C, chunks = ld / VEC;
  for (int j = threadIdx.x; j < ld; j += blockDim.x) {
    const int slot = j % VEC * chunks + j / VEC;
    if (j < real) {
      const int c = j % C, t = j / C;
      table[slot] = make_int4(t / (KH * KW) * DD, t / KW % KH * DH, t % KW * DW, c);
    } else {
      table[slot] = make_int4(0, 0, 0, -1);
    }
  }
  __syncthreads();
  const cc::index_t total = (cc::index_t)N * OD * OH * OW * chunks;
  const bool narrow = total <= 0xffffffffLL;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    cc::index_t r = idx;
    const int chunk = cc::divmod(r, chunks, narrow);
    const int ow = cc::divmod(r, OW, narrow);
    const int oh = cc::divmod(r, OH, narrow);
    const int od = cc::divmod(r, OD, narrow);
    const cc::index_t base = (cc::index_t)r * xsn;
    const int d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
    alignas(16) T v[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int4 e = table[i * chunks + chunk];
      const int id = d0 + e.x, ih = h0 + e.y, iw = w0 + e.z;
      v[i] = (e.w >= 0 && id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
                 ? x[base + e.w * xsc + id * xsd + ih * xsh + iw * xsw]
                 : cc::store_as<T>(0.0f);
    }
    *reinterpret_cast<uint4*>(col + idx * VEC) = *reinterpret_cast<const uint4*>(v);
  }
}

