// Just enough of CUDA to compile a kernel module's source as host C++ and run its kernels on CPU
// threads (tests/host_kernels.py): one std::thread per GPU thread of a block, a
// std::barrier for __syncthreads, blocks one after another.  Kernels see the HIPRTC branch of
// common.cuh (its bf16 is plain bits); __half is IEEE binary16 bits with round-to-nearest-even.
#pragma once
#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <math.h>  // expf, erf, fma (float and double overloads) of the epilogues and loops
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define __HIPCC__ 1
#define __HIPCC_RTC__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// Static __shared__ arrays become function-local statics: one copy per kernel instantiation, seen
// by every thread of the running block (blocks run one after another), as on the GPU.  The
// dynamic `extern __shared__` declarations lose the qualifier before compiling (host_kernels.py)
// and name smem_raw below.
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct host_dim3 {
  unsigned x, y, z;
};
inline thread_local host_dim3 threadIdx, blockIdx;
inline host_dim3 blockDim, gridDim;
inline std::barrier<>* host_block_barrier = nullptr;
inline void __syncthreads() { host_block_barrier->arrive_and_wait(); }
// Dynamic shared memory of the running block (extern __shared__ smem_raw[] in the kernels).
alignas(16) unsigned char smem_raw[96 * 1024];

using std::max;
using std::min;

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
// High 32 bits of the 64-bit product (the strided copy's division by a magic multiplier).
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}

struct __half {
  uint16_t bits;
};
struct __half2 {
  __half x, y;
};
inline float __half2float(__half h) {
  const unsigned sign = (h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ff;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}
inline __half __float2half_rn(float f) {
  const unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u;
  const unsigned a = u & 0x7fffffffu;
  __half h;
  if (a > 0x7f800000u) { h.bits = (uint16_t)(sign | 0x7e00u); return h; }  // NaN
  if (a >= 0x477ff000u) { h.bits = (uint16_t)(sign | 0x7c00u); return h; }  // overflow to inf
  if (a < 0x38800000u) {  // subnormal half: round a * 2^24 to an integer, ties to even
    const float v = __uint_as_float(a) * 16777216.0f;
    float r = (float)(long)v;
    const float frac = v - r;
    if (frac > 0.5f || (frac == 0.5f && ((long)r & 1))) r += 1.0f;
    h.bits = (uint16_t)(sign | (unsigned)r);
    return h;
  }
  const unsigned rounded = a + 0xfffu + ((a >> 13) & 1u);  // ties to even at bit 13
  h.bits = (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
  return h;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }

struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct double2 {
  double x, y;
};
inline double2 make_double2(double x, double y) { return {x, y}; }
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// CC_SYNCWARP of the HIPRTC branch (common.cuh): the fences are no-ops here and the wave barrier
// waits for the thread's 32-lane group (consecutive linear thread ids), which the kernels that
// use it (the plane row walks) sync on their own.
inline thread_local std::barrier<>* host_group_barrier = nullptr;
#define __builtin_amdgcn_fence(...) ((void)0)
#define __builtin_amdgcn_wave_barrier() host_group_barrier->arrive_and_wait()

// Run `body` (one GPU thread's work) for every thread of every block of the grid; shared memory
// is filled with NaN bytes before each block, so reading what no thread staged shows.
template <typename Body>
void host_run_grid(host_dim3 grid, host_dim3 block, Body body) {
  gridDim = grid;
  blockDim = block;
  const unsigned nt = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::memset(smem_raw, 0xff, sizeof(smem_raw));
        std::barrier<> bar((std::ptrdiff_t)nt);
        host_block_barrier = &bar;
        std::vector<std::unique_ptr<std::barrier<>>> groups;
        for (unsigned g = 0; g < nt; g += 32)
          groups.push_back(std::make_unique<std::barrier<>>((std::ptrdiff_t)std::min(32u, nt - g)));
        std::vector<std::thread> threads;
        threads.reserve(nt);
        for (unsigned tz = 0; tz < block.z; ++tz)
          for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx)
              threads.emplace_back([&, tx, ty, tz] {
                threadIdx = {tx, ty, tz};
                blockIdx = {bx, by, bz};
                std::barrier<>* group = groups[(tx + block.x * (ty + block.y * tz)) / 32].get();
                host_group_barrier = group;
                body();
                bar.arrive_and_drop();  // an exited thread no longer holds barriers back
                group->arrive_and_drop();
              });
        for (auto& t : threads) t.join();
      }
}

// Call kernel `f` with its arguments taken from `args` in order: a pointer parameter gets the
// address itself, any other (a scalar) the value stored at the address.
template <typename P>
P host_arg(void* a) {
  if constexpr (std::is_pointer_v<P>) return reinterpret_cast<P>(a);
  else return *reinterpret_cast<const P*>(a);
}
template <typename... P, std::size_t... I>
void host_call(void (*f)(P...), void* const* args, std::index_sequence<I...>) {
  f(host_arg<P>(args[I])...);
}
template <typename... P>
void host_launch(void (*f)(P...), void* const* args, const unsigned* dims) {
  host_run_grid({dims[0], dims[1], dims[2]}, {dims[3], dims[4], dims[5]},
                [&] { host_call(f, args, std::index_sequence_for<P...>()); });
}
