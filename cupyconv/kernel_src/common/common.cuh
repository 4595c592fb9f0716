// Portability block shared by every kernel: the same source compiles with NVRTC (NVIDIA) and
// HIPRTC/hipcc (AMD ROCm).  Kernels include this file and nothing platform-specific of their own.
#pragma once

#if defined(__HIPCC__)
  // HIPRTC pre-includes the half types; including the header again is a redefinition error.
  #if !defined(__HIPCC_RTC__)
    #include <hip/hip_runtime.h>
    #include <hip/hip_fp16.h>
  #endif
  #define CC_SHFL_DOWN(v, d) __shfl_down((v), (d))
  #define CC_SHFL_XOR(v, d) __shfl_xor((v), (d))
  // What __syncwarp() is to NVIDIA for the 32-lane groups below (filter_plane, depthwise_plane):
  // the lanes of a wavefront run in lockstep and the LDS executes one wave's operations in order,
  // so no instruction is needed, but the compiler must not move shared-memory accesses across it
  // (one lane reads what another wrote): a wavefront-scope release/acquire around wave_barrier,
  // as HIP 7's own __syncwarp does (older HIP, ROCm 5.2's here included, has none).  It emits no
  // synchronising instruction.
  #define CC_SYNCWARP()                                       \
    do {                                                      \
      __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");  \
      __builtin_amdgcn_wave_barrier();                        \
      __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");  \
    } while (0)
  #define CC_TRAP() __builtin_trap()
  // The host passes the wave size per target (-DCC_WAVE_SIZE, cupyconv/_core/jit.py: 64 on gfx9
  // CDNA, 32 on RDNA), not __AMDGCN_WAVEFRONT_SIZE (deprecated; ROCm 7 also made warpSize a
  // run-time value).  Without the define: 64 on gfx9, else the RDNA compilers' default of 32.
  #if defined(CC_WAVE_SIZE)
    #define CC_WARP_SIZE CC_WAVE_SIZE
  #elif defined(__GFX9__)
    #define CC_WARP_SIZE 64
  #else
    #define CC_WARP_SIZE 32
  #endif
  // Kernels that split a block into 32-lane groups (tid >> 5, tid & 31) and sync a group with
  // CC_SYNCWARP rely on each group lying inside one hardware wave: true for wave32 and wave64.
  static_assert(CC_WARP_SIZE == 32 || CC_WARP_SIZE == 64, "AMD waves have 32 or 64 lanes");
#elif defined(__CUDACC__)
  #include <cuda_fp16.h>
  #define CC_SHFL_DOWN(v, d) __shfl_down_sync(0xffffffffu, (v), (d))
  #define CC_SHFL_XOR(v, d) __shfl_xor_sync(0xffffffffu, (v), (d))
  #define CC_SYNCWARP() __syncwarp()
  #define CC_TRAP() __trap()
  #define CC_WARP_SIZE 32
#else
  #error "cupyconv kernels are compiled with NVRTC or HIPRTC"
#endif

#if defined(__CUDACC__)
  #include <cuda_bf16.h>
#endif

// A compiler-only memory fence (no instruction): memory accesses are not moved across it.  The
// unrolled row walk uses it to keep each row's loads one row ahead instead of all hoisted.
#define CC_COMPILER_FENCE() asm volatile("" ::: "memory")

namespace cc {

// 64-bit index type: any tensor may pass 2^31 elements.
typedef long long index_t;
// "No source here" for element offsets, which views with negative strides make negative: the
// one value no offset of a real element can take.
constexpr index_t NO_OFFSET = -0x7fffffffffffffffLL - 1;

constexpr int cmax(int a, int b) { return a > b ? a : b; }

// bfloat16 storage: CUDA's own type (its intrinsics and the tensor-core operand format), and on
// AMD a plain 16-bit payload with the conversions written out (HIP 5.x headers do not compile under
// HIPRTC).  Both are the upper half of a float32: widening is a shift, narrowing rounds to nearest
// even and keeps NaNs quiet.
#if defined(__CUDACC__)
typedef __nv_bfloat16 bf16;
__device__ __forceinline__ float bf16_to_float(const bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 float_to_bf16(const float f) { return __float2bfloat16_rn(f); }
#else
struct bf16 {
  unsigned short bits;
};
__device__ __forceinline__ float bf16_to_float(const bf16 v) {
  return __uint_as_float((unsigned)v.bits << 16);
}
__device__ __forceinline__ bf16 float_to_bf16(const float f) {
  const unsigned u = __float_as_uint(f);
  bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) r.bits = (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
  else r.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return r;
}
#endif

// Accumulation type per storage type (no <type_traits> under NVRTC/HIPRTC): the 16-bit floating
// types accumulate in float32.
template <typename T> struct acc_type { typedef T type; };
template <> struct acc_type<__half> { typedef float type; };
template <> struct acc_type<bf16> { typedef float type; };

// Conversions between storage and compute types.  Same-type loads and stores are copies, so a
// loader may keep 16-bit values as they are (the tensor-core main loop does).
template <typename A, typename T> __device__ __forceinline__ A load_as(const T v) { return static_cast<A>(v); }
template <> __device__ __forceinline__ float load_as<float, __half>(const __half v) { return __half2float(v); }
template <> __device__ __forceinline__ float load_as<float, bf16>(const bf16 v) { return bf16_to_float(v); }
template <> __device__ __forceinline__ __half load_as<__half, __half>(const __half v) { return v; }
template <> __device__ __forceinline__ bf16 load_as<bf16, bf16>(const bf16 v) { return v; }

// Zero of a storage or accumulator type (no int constructor is relied on for the 16-bit types).
template <typename T> __device__ __forceinline__ T zero() { return T(0); }
template <> __device__ __forceinline__ __half zero<__half>() { return __float2half(0.0f); }
template <> __device__ __forceinline__ bf16 zero<bf16>() { return float_to_bf16(0.0f); }

// NaN test of a compute-type value (kernels are compiled without fast-math, so x != x holds).
template <typename A> __device__ __forceinline__ bool is_nan(const A v) { return v != v; }

template <typename T, typename A> __device__ __forceinline__ T store_as(const A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half store_as<__half, float>(const float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ bf16 store_as<bf16, float>(const float v) { return float_to_bf16(v); }
template <> __device__ __forceinline__ __half store_as<__half, __half>(const __half v) { return v; }
template <> __device__ __forceinline__ bf16 store_as<bf16, bf16>(const bf16 v) { return v; }

// r % d, leaving r / d in r.  `narrow` (uniform per launch: every index fits 32 bits) selects a
// 32-bit division, several times cheaper than the 64-bit one.
__device__ __forceinline__ int divmod(index_t& r, int d, bool narrow) {
  if (narrow) {
    const unsigned q = (unsigned)r / (unsigned)d;
    const int m = (int)((unsigned)r - q * (unsigned)d);
    r = q;
    return m;
  }
  const index_t q = r / d;
  const int m = (int)(r - q * d);
  r = q;
  return m;
}

// (n, c, d, h, w) of element `idx` of a contiguous (N, C, D, H, W) or (N, D, H, W, C) activation.
__device__ __forceinline__ void split_activation(index_t idx, int C, int D, int H, int W,
                                                 bool channels_last, bool narrow, int& n, int& c,
                                                 int& d, int& h, int& w) {
  if (channels_last) c = divmod(idx, C, narrow);
  w = divmod(idx, W, narrow);
  h = divmod(idx, H, narrow);
  d = divmod(idx, D, narrow);
  if (!channels_last) c = divmod(idx, C, narrow);
  n = (int)idx;
}

// Spatial problems are padded in front to three dims (D, H, W) so one kernel serves 1-, 2- and 3-d.
struct Dims3 {
  int d, h, w;
};

// Four accumulator values stored as four consecutive elements of T (one vector store, global or
// shared memory); `p` aligned to four elements.
__device__ __forceinline__ void stg4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void stg4(double* p, const double* v) {
  reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
  reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
}
__device__ __forceinline__ void stg4(__half* p, const float* v) {
  reinterpret_cast<__half2*>(p)[0] = __floats2half2_rn(v[0], v[1]);
  reinterpret_cast<__half2*>(p)[1] = __floats2half2_rn(v[2], v[3]);
}
__device__ __forceinline__ void stg4(bf16* p, const float* v) {
  bf16 t[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) t[e] = float_to_bf16(v[e]);
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(t);
}

}  // namespace cc
