// Hopper's bulk tensor copies (TMA) and the shared-memory barriers (mbarrier) they complete on,
// as thin PTX wrappers for the TMA GEMM (gemm_tma.cu).  NVIDIA sm_90a only: everything but the
// tensor-map parameter type sits behind __CUDA_ARCH_FEAT_SM90_ALL.
#pragma once
#include "common.cuh"

namespace cc {

// A tensor map as a kernel parameter: the driver's CUtensorMap is 128 opaque bytes aligned to
// 64 (its public definition in cuda.h), encoded on the host by cuTensorMapEncodeTiled
// (cupyconv/_gemm/tma.py) and passed by value as a `const __grid_constant__` parameter, so the
// copy engine reads it from parameter memory.  Nothing here interprets the bytes: NVRTC has no
// cuda.h, and only the size and alignment have to match the driver's.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "CUtensorMap is 128 bytes");

}  // namespace cc

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace cc {
namespace hopper {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// ---- mbarrier: a 64-bit shared-memory word with an arrival count and a transaction (byte)
// count; its phase completes when both reach zero, and waiters test the parity of the phase.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals)
               : "memory");
}
// Makes the initialised barriers visible to the async proxy (the copy engine completes
// transactions on them) and to the other threads, before the block's first barrier.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` of copies that will complete on this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Whether the phase of parity `parity` has completed (try_wait suspends the thread for a
// hardware-chosen time before it answers false, so the loop below is not a hot spin).
__device__ __forceinline__ bool mbar_try_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA
// Brings the descriptor into the copy engine's cache ahead of the first copy.
__device__ __forceinline__ void prefetch_tensor_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// The box of `map` whose first element is at (c0, c1) -- c0 along the contiguous dimension --
// into shared memory at `dst` (laid out and swizzled as the map says), completing `bytes` of
// transactions on `bar`.  Elements outside the tensor are written as zeros and still count.
// (A block not launched as a cluster is a cluster of one: its shared::cta addresses are valid
// shared::cluster addresses.)
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map,
                                            unsigned long long* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

// The same for a 3-D map: (c0, c1, c2), c0 along the contiguous dimension (the convolution's
// weights as [K][taps][C]: a box of one tap, so channels past C read as zeros, not as the next
// tap's weights).
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map,
                                            unsigned long long* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
}

// An im2col box of a 4-D channels-last map (C, W, H, N innermost first): the map's pixels per
// column, starting at pixel (w, h, n) shifted by the filter offsets (off_w, off_h) and walking
// the map's pixel window (its corners and element strides) along W, then H, then N; for each
// pixel the map's channels per pixel from channel c.  Pixels outside the tensor (the
// convolution's padding, images past N) read as zeros.
__device__ __forceinline__ void tma_load_im2col_4d(void* dst, const TensorMap* map,
                                                   unsigned long long* bar, int c, int w, int h,
                                                   int n, unsigned short off_w,
                                                   unsigned short off_h) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(smem_u32(bar)), "h"(off_w), "h"(off_h)
      : "memory");
}

// ---- register reallocation between warpgroups (takes effect only under a register cap at
// entry: __launch_bounds__(threads, 1)).  Every thread of the warpgroup executes it.
template <int REGS>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

}  // namespace hopper
}  // namespace cc
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
