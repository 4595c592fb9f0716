// wgmma with both operands in shared memory ("ss"), for the TMA GEMM (gemm_tma.cu): matrix
// descriptors of the 128-byte swizzled tiles that TMA writes, and m64nNk16 (N = 64, 128, 256) on
// fp16 / bf16, or m64nNk8 on TF32 (float operands, both K-major: TF32 has no transposed
// shared-memory operands), with fp32 accumulators.  Either instruction reads 32 bytes of k per
// row, so the descriptors step alike.  sm_90a only.
//
// (gemm_mma.cuh has the same instruction for the cp.async loop at N <= 128; this file stays
// separate so that the TMA kernel compiles without that loop's loaders and hand-off.)
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace cc {
namespace hopper {

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start
// address, 16-29 leading-dimension byte offset, 32-45 stride-dimension byte offset (all three in
// 16-byte units), 49-51 base offset (0: every tile starts 1024-byte aligned), 62-63 swizzle mode
// (1 = 128-byte swizzle).
//
// The tiles are rows of 128 bytes whose 16-byte chunks are permuted by XOR with (row % 8), in
// groups of 8 rows (1024 bytes) -- what TMA's 128-byte swizzle writes into a 1024-byte aligned
// box, and what wgmma's 128-byte swizzle mode reads.
//  * K-major operand (A stored [M, K]; B stored [N, K]): one row of 64 k per m (or n); the 8-row groups
//    are SBO = 1024 bytes apart; LBO is unused in this mode (set to 1); a 16-deep k step is 32
//    bytes further into the rows (the swizzle is applied to the absolute address bits, so a
//    start inside the 128-byte row is valid).
//  * MN-major operand (A stored [K, M]; B stored [K, N]): boxes of 64 m or n (one 128-byte row)
//    by BK k, one row per k; 8-k groups SBO = 1024 bytes apart, consecutive 64-n boxes LBO = BK * 128 bytes apart; a
//    16-deep k step is 16 rows = 2048 bytes further.  These are the offsets the cp.async loop's
//    MN-major operands use (gemm_mma.cuh, WgmmaOperand), measured correct there.
template <bool KMAJOR, int BK>
struct SwizzledOperand {
  static constexpr unsigned long long LBO = KMAJOR ? 16 : BK * 128, SBO = 1024;
  // one instruction's step along k, in 16-byte units: 32 bytes of a K-major row (16 k of a
  // 16-bit type, 8 of TF32), or 16 rows of an MN-major operand (16-bit types only)
  static constexpr unsigned long long K_STEP_DESC = (KMAJOR ? 32 : 16 * 128) / 16;
  static constexpr int TRANS = KMAJOR ? 0 : 1;  // wgmma's imm-trans operand
  static __device__ __forceinline__ unsigned long long desc(const void* p) {
    const unsigned long long addr = smem_u32(p);
    return ((addr & 0x3FFFF) >> 4) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32) | (1ull << 62);
  }
};

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// The tensor cores write the accumulators between an mma_async and the wait that retires it;
// this empty asm tells the compiler they change here, so no read of them moves above the wait.
template <int NF>
__device__ __forceinline__ void touch_accumulators(float (&d)[NF][4]) {
#pragma unroll
  for (int j = 0; j < NF; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// d (64 x N fp32, the warpgroup's accumulators) = (scale_d ? d : 0) + A (64 x 16) * B (16 x N).
// Accumulator register 4 j + e of a thread holds row 16 warp + lane / 4 + 8 (e / 2), column
// 8 j + 2 (lane % 4) + e % 2 of the 64 x N tile (the m16n8 fragment layout, N / 8 times).
#define CC_TMA_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define CC_TMA_REGS64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CC_TMA_OUTS64 \
  CC_TMA_D4(0), CC_TMA_D4(1), CC_TMA_D4(2), CC_TMA_D4(3), CC_TMA_D4(4), CC_TMA_D4(5), CC_TMA_D4(6), CC_TMA_D4(7)
#define CC_TMA_REGS128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define CC_TMA_OUTS128 \
  CC_TMA_D4(0), CC_TMA_D4(1), CC_TMA_D4(2), CC_TMA_D4(3), CC_TMA_D4(4), CC_TMA_D4(5), CC_TMA_D4(6), CC_TMA_D4(7), \
  CC_TMA_D4(8), CC_TMA_D4(9), CC_TMA_D4(10), CC_TMA_D4(11), CC_TMA_D4(12), CC_TMA_D4(13), CC_TMA_D4(14), CC_TMA_D4(15)
#define CC_TMA_REGS256 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define CC_TMA_OUTS256 \
  CC_TMA_D4(0), CC_TMA_D4(1), CC_TMA_D4(2), CC_TMA_D4(3), CC_TMA_D4(4), CC_TMA_D4(5), CC_TMA_D4(6), CC_TMA_D4(7), \
  CC_TMA_D4(8), CC_TMA_D4(9), CC_TMA_D4(10), CC_TMA_D4(11), CC_TMA_D4(12), CC_TMA_D4(13), CC_TMA_D4(14), CC_TMA_D4(15), \
  CC_TMA_D4(16), CC_TMA_D4(17), CC_TMA_D4(18), CC_TMA_D4(19), CC_TMA_D4(20), CC_TMA_D4(21), CC_TMA_D4(22), CC_TMA_D4(23), \
  CC_TMA_D4(24), CC_TMA_D4(25), CC_TMA_D4(26), CC_TMA_D4(27), CC_TMA_D4(28), CC_TMA_D4(29), CC_TMA_D4(30), CC_TMA_D4(31)
// One instruction per (N, type); A, B, SC, TA, TB: the operand numbers of a-desc, b-desc,
// scale-d, imm-trans-a and imm-trans-b, which follow the N / 2 accumulators.  (NVRTC's inline
// asm takes the 133 operands of N = 256.)  K_STEP: the elements of k one instruction reads.

template <int N, typename S> struct WgmmaSS;
#define CC_TMA_SPECIALIZE(N, S, TY, A, B, SC, TA, TB)                                       \
  template <> struct WgmmaSS<N, S> {                                                        \
    static constexpr int K_STEP = 16;                                                       \
    template <int TRANS_A, int TRANS_B>                                                     \
    static __device__ __forceinline__ void run(float (&d)[N / 8][4], unsigned long long da, \
                                               unsigned long long db, int scale_d) {        \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SC ", 0;\n"                        \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {"         \
                   CC_TMA_REGS##N "}, %" A ", %" B ", p, 1, 1, %" TA ", %" TB ";\n}\n"      \
                   : CC_TMA_OUTS##N                                                        \
                   : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));           \
    }                                                                                       \
  };
CC_TMA_SPECIALIZE(64, __half, "f16", "32", "33", "34", "35", "36")
CC_TMA_SPECIALIZE(64, bf16, "bf16", "32", "33", "34", "35", "36")
CC_TMA_SPECIALIZE(128, __half, "f16", "64", "65", "66", "67", "68")
CC_TMA_SPECIALIZE(128, bf16, "bf16", "64", "65", "66", "67", "68")
CC_TMA_SPECIALIZE(256, __half, "f16", "128", "129", "130", "131", "132")
CC_TMA_SPECIALIZE(256, bf16, "bf16", "128", "129", "130", "131", "132")
#undef CC_TMA_SPECIALIZE
// TF32: no imm-trans operands (both operands K-major; the caller asserts it).
#define CC_TMA_SPECIALIZE_TF32(N, A, B, SC)                                                 \
  template <> struct WgmmaSS<N, float> {                                                    \
    static constexpr int K_STEP = 8;                                                        \
    template <int TRANS_A, int TRANS_B>                                                     \
    static __device__ __forceinline__ void run(float (&d)[N / 8][4], unsigned long long da, \
                                               unsigned long long db, int scale_d) {        \
      static_assert(TRANS_A == 0 && TRANS_B == 0, "TF32 operands are K-major");             \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SC ", 0;\n"                        \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {"              \
                   CC_TMA_REGS##N "}, %" A ", %" B ", p, 1, 1;\n}\n"                        \
                   : CC_TMA_OUTS##N                                                        \
                   : "l"(da), "l"(db), "r"(scale_d));                                       \
    }                                                                                       \
  };
CC_TMA_SPECIALIZE_TF32(64, "32", "33", "34")
CC_TMA_SPECIALIZE_TF32(128, "64", "65", "66")
CC_TMA_SPECIALIZE_TF32(256, "128", "129", "130")
#undef CC_TMA_SPECIALIZE_TF32
#undef CC_TMA_OUTS64
#undef CC_TMA_OUTS128
#undef CC_TMA_OUTS256
#undef CC_TMA_REGS64
#undef CC_TMA_REGS128
#undef CC_TMA_REGS256
#undef CC_TMA_D4

}  // namespace hopper
}  // namespace cc
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
