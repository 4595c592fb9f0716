// Direct convolution, one output element per thread: the always-correct GPU reference.
//
// Every tensor is read through element strides passed at run time, so one binary per dtype serves
// 1-, 2- and 3-d problems (spatial dims padded in front to D, H, W), both layouts, groups and
// non-contiguous inputs.  Threads are numbered in the output's memory order (`channels_last` says
// which), so consecutive threads write consecutive addresses.  The fused epilogue adds the bias
// and the residual z (read at y's element offset: z has y's strides) and applies the activation
// (activation.cuh) before the one store.
//
// only_nan != 0: the repair pass after a GEMM over merged groups (block-diagonal weights,
// cupyconv._gemm.grouped).  There a NaN or inf of one group's input meets the zero weights of the
// other groups of its merged group and makes their outputs NaN (0 * inf, 0 * NaN); every output
// so hit is NaN (the epilogue's activations let NaN through), and an output whose inputs are all
// finite is exact.  So the pass recomputes, skipping taps outside the window, only the outputs
// that are NaN: each then reads only its own group, as PyTorch's result does.  The result must be
// C-contiguous in its layout (the host checks), so an element's index is its offset, and the scan
// reads it 16 bytes per thread: a finite result costs one coalesced vector read (for_each_nan).
#include "common.cuh"
#include "activation.cuh"

// Calls visit(idx) for every idx < total with p[idx] NaN, over the whole grid.  Where p is 16-byte
// aligned each thread tests NAN_SCAN_UNROLL x V elements per step (V = 16 / sizeof(T)), issuing
// its vector loads before any test so that several are in flight (the direct kernel's registers
// keep occupancy low: one load per thread measured ~1 TB/s); the launch covers
// total / (V * NAN_SCAN_UNROLL) threads.  The tail, and an unaligned p, go element by element.
template <typename T, typename F>
__device__ __forceinline__ void for_each_nan(const T* __restrict__ p, cc::index_t total, F visit) {
  typedef typename cc::acc_type<T>::type A;
  constexpr int V = sizeof(T) < 16 ? 16 / sizeof(T) : 1, U = NAN_SCAN_UNROLL;
  const cc::index_t first = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x;
  const cc::index_t step = (cc::index_t)blockDim.x * gridDim.x;
  const bool aligned = reinterpret_cast<unsigned long long>(p) % 16 == 0;
  const cc::index_t vectors = aligned ? total / V : 0;
  const uint4* pv = reinterpret_cast<const uint4*>(p);
  for (cc::index_t v0 = first; v0 < vectors; v0 += step * U) {
    uint4 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (v0 + u * step < vectors) raw[u] = pv[v0 + u * step];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (v0 + u * step >= vectors) break;
      const T* e = reinterpret_cast<const T*>(&raw[u]);
      bool any = false;
#pragma unroll
      for (int j = 0; j < V; ++j) any |= cc::is_nan(cc::load_as<A>(e[j]));
      if (any) {  // rare: the outputs to repair
        for (int j = 0; j < V; ++j)
          if (cc::is_nan(cc::load_as<A>(e[j]))) visit((v0 + u * step) * V + j);
      }
    }
  }
  for (cc::index_t idx = vectors * V + first; idx < total; idx += step)
    if (cc::is_nan(cc::load_as<A>(p[idx]))) visit(idx);
}

// compute(idx) for every output element idx < total over the whole grid, or with only_nan (the
// repair pass) for those whose stored value is NaN (for_each_nan).
template <typename T, typename F>
__device__ __forceinline__ void for_each_output(const T* __restrict__ result, cc::index_t total,
                                                int only_nan, F compute) {
  if (only_nan) {
    for_each_nan(result, total, compute);
    return;
  }
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x)
    compute(idx);
}

template <typename T>
__global__ void direct_conv(const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ bias, const T* __restrict__ z,
                            T* __restrict__ y, int has_bias, int has_z, int act,
                            int N, int C, int K, int groups,
                            int D, int H, int W, int OD, int OH, int OW,
                            int KD, int KH, int KW, int SD, int SH, int SW,
                            int DD, int DH, int DW, int PD, int PH, int PW,
                            cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw,
                            cc::index_t wsk, cc::index_t wsc, cc::index_t wsd, cc::index_t wsh, cc::index_t wsw,
                            cc::index_t ysn, cc::index_t ysk, cc::index_t ysd, cc::index_t ysh, cc::index_t ysw,
                            int channels_last, int only_nan) {
  typedef typename cc::acc_type<T>::type A;
  const cc::index_t total = (cc::index_t)N * K * OD * OH * OW;
  const int cpg = C / groups, kpg = K / groups;
  const bool narrow = total <= 0xffffffffLL;
  const cc::Epilogue<T> ep = {z, has_z, act};
  auto compute = [&](const cc::index_t idx) {
    int n, k, od, oh, ow;
    cc::split_activation(idx, K, OD, OH, OW, channels_last, narrow, n, k, od, oh, ow);
    const cc::index_t y_off = n * ysn + k * ysk + od * ysd + oh * ysh + ow * ysw;
    const T* xg = x + n * xsn + (cc::index_t)(k / kpg) * cpg * xsc;
    const T* wk = w + k * wsk;
    A acc = 0;
    for (int kd = 0; kd < KD; ++kd) {
      const int id = od * SD - PD + kd * DD;
      if (id < 0 || id >= D) continue;
      for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; ++kw) {
          const int iw = ow * SW - PW + kw * DW;
          if (iw < 0 || iw >= W) continue;
          const T* xp = xg + id * xsd + ih * xsh + iw * xsw;
          const T* wp = wk + kd * wsd + kh * wsh + kw * wsw;
          for (int c = 0; c < cpg; ++c) {
            acc += cc::load_as<A>(xp[c * xsc]) * cc::load_as<A>(wp[c * wsc]);
          }
        }
      }
    }
    if (has_bias) acc += cc::load_as<A>(bias[k]);
    y[y_off] = cc::store_as<T>(ep(acc, y_off));
  };
  for_each_output(y, total, only_nan, compute);
}

// Backward-data (a transposed convolution), one dx element per thread: dx[n, c, i] = sum over
// the taps t and the output channels k of c's group with i = o * S - P + t * Dil for an output
// position o inside dy, of dy[n, k, o] * w[k, c % Cg, t], plus bias[c] where has_bias.  Strides
// and shapes as in direct_conv (D, H, W: dx's spatial size, OD, OH, OW: dy's).  Used as the repair
// pass of backward-data over merged groups (only_nan, as above).
template <typename T>
__global__ void direct_dgrad(const T* __restrict__ dy, const T* __restrict__ w,
                             const T* __restrict__ bias, T* __restrict__ dx, int has_bias,
                             int N, int C, int K, int groups,
                             int D, int H, int W, int OD, int OH, int OW,
                             int KD, int KH, int KW, int SD, int SH, int SW,
                             int DD, int DH, int DW, int PD, int PH, int PW,
                             cc::index_t gsn, cc::index_t gsk, cc::index_t gsd, cc::index_t gsh, cc::index_t gsw,
                             cc::index_t wsk, cc::index_t wsc, cc::index_t wsd, cc::index_t wsh, cc::index_t wsw,
                             cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw,
                             int channels_last, int only_nan) {
  typedef typename cc::acc_type<T>::type A;
  const cc::index_t total = (cc::index_t)N * C * D * H * W;
  const int cpg = C / groups, kpg = K / groups;
  const bool narrow = total <= 0xffffffffLL;
  auto compute = [&](const cc::index_t idx) {
    int n, c, id, ih, iw;
    cc::split_activation(idx, C, D, H, W, channels_last, narrow, n, c, id, ih, iw);
    const cc::index_t x_off = n * xsn + c * xsc + id * xsd + ih * xsh + iw * xsw;
    const int k0 = c / cpg * kpg;
    const T* wc = w + (cc::index_t)k0 * wsk + (c % cpg) * wsc;
    const T* gn = dy + n * gsn + (cc::index_t)k0 * gsk;
    A acc = 0;
    for (int kd = 0; kd < KD; ++kd) {
      const int td = id + PD - kd * DD;  // o * S of the output this tap reads, if any
      if (td < 0 || td % SD) continue;
      const int od = td / SD;
      if (od >= OD) continue;
      for (int kh = 0; kh < KH; ++kh) {
        const int th = ih + PH - kh * DH;
        if (th < 0 || th % SH) continue;
        const int oh = th / SH;
        if (oh >= OH) continue;
        for (int kw = 0; kw < KW; ++kw) {
          const int tw = iw + PW - kw * DW;
          if (tw < 0 || tw % SW) continue;
          const int ow = tw / SW;
          if (ow >= OW) continue;
          const T* gp = gn + od * gsd + oh * gsh + ow * gsw;
          const T* wp = wc + kd * wsd + kh * wsh + kw * wsw;
          for (int k = 0; k < kpg; ++k) acc += cc::load_as<A>(gp[k * gsk]) * cc::load_as<A>(wp[k * wsk]);
        }
      }
    }
    if (has_bias) acc += cc::load_as<A>(bias[c]);
    dx[x_off] = cc::store_as<T>(acc);
  };
  for_each_output(dx, total, only_nan, compute);  // (dx C-contiguous with only_nan, above)
}
