// Strided copy of an up-to-6-d view into another view of the same shape: the weight transforms,
// channel moves and scatters of the launch paths, as a kernel of the package's own (so a
// prepared call replays it like any other launch, with no CuPy elementwise op on the host path).
// Dims are given innermost last; extents of unused leading dims are 1.
#include "common.cuh"
#ifndef CC_COPY_DIMS
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
static_assert(CC_COPY_DIMS == 6, "strided_copy's signature takes six dims");

// Each element decodes its index into the six dims.  Where every index fits 31 bits (`total`
// below 2^31, uniform per launch) the divisions are multiplications by the host's magic numbers
// (mul, shr: quotient = umulhi(r, mul) >> shr, exact for r < 2^31; mul 0 for extent 1, the padded
// leading dims): the channel-padding copy of ResNet conv1's fp16 input (4.8M elements) went from
// 82 to 43 us with them (six 64-bit divisions per element before; H100, benchmarks/notes/gemm.md,
// "Session 12").
// Larger copies keep the 64-bit divisions.
template <typename T>
__global__ void strided_copy(const T* __restrict__ src, T* __restrict__ dst, cc::index_t total,
                             cc::index_t e0, cc::index_t e1, cc::index_t e2, cc::index_t e3,
                             cc::index_t e4, cc::index_t e5,
                             cc::index_t s0, cc::index_t s1, cc::index_t s2, cc::index_t s3,
                             cc::index_t s4, cc::index_t s5,
                             cc::index_t d0, cc::index_t d1, cc::index_t d2, cc::index_t d3,
                             cc::index_t d4, cc::index_t d5,
                             unsigned m0, unsigned m1, unsigned m2, unsigned m3, unsigned m4,
                             unsigned m5, int h0, int h1, int h2, int h3, int h4, int h5) {
  const cc::index_t ext[6] = {e0, e1, e2, e3, e4, e5};
  const cc::index_t ss[6] = {s0, s1, s2, s3, s4, s5};
  const cc::index_t ds[6] = {d0, d1, d2, d3, d4, d5};
  const unsigned mul[6] = {m0, m1, m2, m3, m4, m5};
  const int shr[6] = {h0, h1, h2, h3, h4, h5};
  const cc::index_t step = (cc::index_t)blockDim.x * gridDim.x;
  if (total <= 0x7fffffff) {
    for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += step) {
      unsigned r = (unsigned)idx;
      cc::index_t so = 0, dof = 0;
#pragma unroll
      for (int d = 5; d >= 0; --d) {
        const unsigned q = mul[d] ? __umulhi(r, mul[d]) >> shr[d] : r;
        const unsigned i = r - q * (unsigned)ext[d];
        r = q;
        so += (cc::index_t)i * ss[d];
        dof += (cc::index_t)i * ds[d];
      }
      dst[dof] = src[so];
    }
    return;
  }
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    cc::index_t r = idx, so = 0, dof = 0;
#pragma unroll
    for (int d = 5; d >= 0; --d) {
      const cc::index_t i = r % ext[d];
      r /= ext[d];
      so += i * ss[d];
      dof += i * ds[d];
    }
    dst[dof] = src[so];
  }
}

// A copy that transposes: src is contiguous along dim a (unit stride), dst along another dim b.
// strided_copy would read src with a warp's loads spread over 32 lines (and decode six 64-bit
// indices per element); here a block moves 32 x 32 tiles of (a, b) through shared memory, reading
// rows along a and writing rows along b, both coalesced.  Up to four other dims ("outer") are
// decoded once per tile.  Block: 32 x 8 threads; tiles are walked grid-stride.
#define CC_TT 32
template <typename T>
__global__ void __launch_bounds__(256) transpose_copy(
    const T* __restrict__ src, T* __restrict__ dst, cc::index_t ea, cc::index_t eb,
    cc::index_t src_sb, cc::index_t dst_sa, cc::index_t o0, cc::index_t o1, cc::index_t o2,
    cc::index_t o3, cc::index_t so0, cc::index_t so1, cc::index_t so2, cc::index_t so3,
    cc::index_t do0, cc::index_t do1, cc::index_t do2, cc::index_t do3) {
  __shared__ T tile[CC_TT][CC_TT + 1];  // tile[b][a]; the padding column spreads the banks
  const cc::index_t ta = (ea + CC_TT - 1) / CC_TT, tb = (eb + CC_TT - 1) / CC_TT;
  const cc::index_t tiles = ta * tb * o0 * o1 * o2 * o3;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (cc::index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    cc::index_t r = t;
    const cc::index_t a0 = (r % ta) * CC_TT; r /= ta;
    const cc::index_t b0 = (r % tb) * CC_TT; r /= tb;
    const cc::index_t i3 = r % o3; r /= o3;
    const cc::index_t i2 = r % o2; r /= o2;
    const cc::index_t i1 = r % o1; const cc::index_t i0 = r / o1;
    const T* s = src + i0 * so0 + i1 * so1 + i2 * so2 + i3 * so3;
    T* d = dst + i0 * do0 + i1 * do1 + i2 * do2 + i3 * do3;
    __syncthreads();  // the previous tile's reads of `tile` are done
#pragma unroll
    for (int j = 0; j < CC_TT; j += 8) {
      const cc::index_t a = a0 + tx, b = b0 + ty + j;
      if (a < ea && b < eb) tile[ty + j][tx] = s[a + b * src_sb];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < CC_TT; j += 8) {
      const cc::index_t a = a0 + ty + j, b = b0 + tx;
      if (a < ea && b < eb) d[a * dst_sa + b] = tile[tx][ty + j];
    }
  }
}

// Width unfolding (cupyconv._gemm.staging._unfolded): out[row, ow, j * C + c] =
// x[row, ow * SW + j * DW - PW, c] for the KW taps j of each output column ow, zero outside x
// and in the padding columns [KW * C, width), for every row (n, d, h) of x.  The implicit GEMM
// of a few-channel layer then reads whole kernel rows as channels (K = KD * KH * width instead
// of taps * C padded to a chunk).  x is read through its strides (either layout, any view); out
// is C-contiguous (rows, OW, width), rows of fewer than 2^30 columns.  Blocks walk rows along x
// and column ranges along y; each thread steps through its columns with a fixed (ow, j)
// increment, and a shared table gives column j's tap offset and channel, so no element divides
// (a division per element made this copy instruction-bound: 181 us for ResNet conv1 at batch 32
// on an H100).  Dynamic shared memory: 2 * width ints.
template <typename T>
__global__ void __launch_bounds__(256) unfold_width(
    const T* __restrict__ x, T* __restrict__ out, cc::index_t rows, int D, int H, int W, int C,
    int OW, int KW, int SW, int DW, int PW, int width, cc::index_t sn, cc::index_t sd,
    cc::index_t sh, cc::index_t sw, cc::index_t sc) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int* tap_offset = reinterpret_cast<int*>(smem_raw);  // j's tap * DW, or far out for padding
  int* channel = tap_offset + width;                   // j's channel
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    const int tap = j / C;
    tap_offset[j] = tap < KW ? tap * DW : -(1 << 30);
    channel[j] = j - tap * C;
  }
  __syncthreads();
  const int cols = OW * width;  // (the host keeps a row's columns below 2^31)
  const int step = gridDim.y * blockDim.x, first = blockIdx.y * blockDim.x + threadIdx.x;
  const int step_o = step / width, step_j = step - step_o * width;
  const int first_o = first / width, first_j = first - first_o * width;
  for (cc::index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const cc::index_t nd = row / H;
    const int h = (int)(row - nd * H);
    const cc::index_t n = nd / D;
    const int d = (int)(nd - n * D);
    const T* src = x + n * sn + d * sd + h * sh;
    T* dst = out + row * cols;
    int o = first_o, j = first_j;
    for (int q = first; q < cols; q += step) {
      const int iw = o * SW + tap_offset[j] - PW;
      T v = cc::zero<T>();
      if (iw >= 0 && iw < W) v = src[iw * sw + channel[j] * sc];
      dst[q] = v;
      o += step_o;
      j += step_j;
      if (j >= width) {
        j -= width;
        ++o;
      }
    }
  }
}

// The block-diagonal weight of merged groups (cupyconv._gemm.grouped.expand_weight): dst is
// (rows, outer, factor * cg, inner) and src (rows, outer, cg, inner), both C-contiguous, where
// row r lies in block j = (r / kg) % factor of its merged group: dst holds src's row in channels
// j * cg .. (j + 1) * cg - 1 and zeros in the others.  Channels-last weights are (outer = taps,
// inner = 1), channels-first ones (1, taps).  Each thread writes whole dst elements, zeros
// included, so one launch replaces a memset and a strided copy (about 1 us less per merged
// ResNeXt call in a CUDA graph on the H100).  I: unsigned, 32 or 64 bits (a channel left of the
// block wraps to a value >= cg).
template <typename I, typename T>
__device__ __forceinline__ void block_diagonal_at(const T* __restrict__ src, T* __restrict__ dst,
                                                  I idx, I outer, I cg, I inner, I kg, I factor) {
  const I q = idx % inner;
  I t = idx / inner;
  const I fcg = factor * cg;
  const I cm = t % fcg;
  t /= fcg;
  const I p = t % outer, r = t / outer;
  const I c = cm - (r / kg) % factor * cg;
  dst[idx] = c < cg ? src[((r * outer + p) * cg + c) * inner + q] : cc::zero<T>();
}

template <typename T>
__global__ void __launch_bounds__(256) block_diagonal(
    const T* __restrict__ src, T* __restrict__ dst, cc::index_t total, int outer, int cg,
    int inner, int kg, int factor) {
  const cc::index_t step = (cc::index_t)blockDim.x * gridDim.x;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    if (total <= 0xffffffffLL)
      block_diagonal_at<unsigned>(src, dst, (unsigned)idx, (unsigned)outer, (unsigned)cg,
                                  (unsigned)inner, (unsigned)kg, (unsigned)factor);
    else
      block_diagonal_at<unsigned long long>(src, dst, (unsigned long long)idx,
                                            (unsigned long long)outer, (unsigned long long)cg,
                                            (unsigned long long)inner, (unsigned long long)kg,
                                            (unsigned long long)factor);
  }
}
