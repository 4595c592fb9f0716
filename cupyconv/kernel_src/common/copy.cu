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
