// Strided copy of an up-to-6-d view into another view of the same shape: the weight transforms,
// channel moves and scatters of the launch paths, as a kernel of the package's own (so a
// prepared call replays it like any other launch, with no CuPy elementwise op on the host path).
// Dims are given innermost last; extents of unused leading dims are 1.
#include "common.cuh"
#ifndef CC_COPY_DIMS
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif
static_assert(CC_COPY_DIMS == 6, "strided_copy's signature takes six dims");

template <typename T>
__global__ void strided_copy(const T* __restrict__ src, T* __restrict__ dst, cc::index_t total,
                             cc::index_t e0, cc::index_t e1, cc::index_t e2, cc::index_t e3,
                             cc::index_t e4, cc::index_t e5,
                             cc::index_t s0, cc::index_t s1, cc::index_t s2, cc::index_t s3,
                             cc::index_t s4, cc::index_t s5,
                             cc::index_t d0, cc::index_t d1, cc::index_t d2, cc::index_t d3,
                             cc::index_t d4, cc::index_t d5) {
  const cc::index_t ext[6] = {e0, e1, e2, e3, e4, e5};
  const cc::index_t ss[6] = {s0, s1, s2, s3, s4, s5};
  const cc::index_t ds[6] = {d0, d1, d2, d3, d4, d5};
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
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
