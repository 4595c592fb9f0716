// Just enough of CUDA to compile a kernel module's source as host C++ and run its kernels on the
// CPU (tests/host_kernels.py): each GPU thread of a block is a fiber (ucontext) with a stack of its
// own, all of a block's fibers run on the calling thread, one at a time, each until it reaches a
// barrier or returns; __syncthreads releases them when every live thread of the block waits there,
// the wave barrier when every live thread of its 32-lane group does (an exited thread no longer
// counts, as with std::barrier's arrive_and_drop).  Blocks run one after another.  (Until session
// 29 each GPU thread was an OS thread: 256 thread creations per block and futex hand-offs at every
// barrier on a 2-core CI machine; a schedule that runs threads in order between barriers is one a
// GPU may run as well.)  Kernels see the HIPRTC branch of common.cuh (its bf16 is plain bits);
// __half is IEEE binary16 bits with round-to-nearest-even.
#pragma once
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>  // expf, erf, fma (float and double overloads) of the epilogues and loops
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

// A GPU thread as a fiber, and where it stands.
enum host_fiber_state { HOST_READY, HOST_AT_BLOCK_BARRIER, HOST_AT_WAVE_BARRIER, HOST_DONE };
struct host_fiber {
  ucontext_t ctx;
  host_dim3 tid;
  host_fiber_state state;
};
inline thread_local ucontext_t host_scheduler;       // where a fiber's yield returns to
inline thread_local host_fiber* host_current = nullptr;
inline thread_local void* host_body = nullptr;       // the running launch's per-thread body
inline thread_local void (*host_body_call)(void*) = nullptr;

inline void host_yield(host_fiber_state state) {
  host_current->state = state;
  swapcontext(&host_current->ctx, &host_scheduler);
}
inline void __syncthreads() { host_yield(HOST_AT_BLOCK_BARRIER); }
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
#define __builtin_amdgcn_fence(...) ((void)0)
#define __builtin_amdgcn_wave_barrier() host_yield(HOST_AT_WAVE_BARRIER)

// Fiber stacks: HOST_STACK bytes each above a guard page (an overflow faults instead of writing
// into the next stack), reserved once per process for the largest block seen and reused.
inline constexpr size_t HOST_STACK = 1 << 20;
struct host_stacks {
  unsigned char* base = nullptr;
  size_t page = 0, count = 0;
  unsigned char* get(size_t i, size_t need) {
    if (need > count) {
      if (base) munmap(base, count * (HOST_STACK + page));
      page = (size_t)sysconf(_SC_PAGESIZE);
      const size_t bytes = need * (HOST_STACK + page);
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) { std::perror("host_shim: mmap of fiber stacks"); std::abort(); }
      base = static_cast<unsigned char*>(p);
      count = need;
      for (size_t j = 0; j < count; ++j) mprotect(base + j * (HOST_STACK + page), page, PROT_NONE);
    }
    return base + i * (HOST_STACK + page) + page;
  }
};
inline thread_local host_stacks host_stack_pool;

inline void host_fiber_main() {
  host_body_call(host_body);
  host_current->state = HOST_DONE;  // (uc_link: back to the scheduler)
}

// Release the threads waiting at a barrier every live thread of its scope has reached: the
// block's, else each 32-lane group's.  Returns whether any was released.
inline bool host_release(std::vector<host_fiber>& fibers) {
  size_t live = 0, at_block = 0;
  for (auto& f : fibers) {
    live += f.state != HOST_DONE;
    at_block += f.state == HOST_AT_BLOCK_BARRIER;
  }
  if (live && at_block == live) {
    for (auto& f : fibers) f.state = HOST_READY;
    return true;
  }
  bool released = false;
  for (size_t g = 0; g < fibers.size(); g += 32) {
    const size_t end = std::min(fibers.size(), g + 32);
    size_t group_live = 0, waiting = 0;
    for (size_t i = g; i < end; ++i) {
      group_live += fibers[i].state != HOST_DONE;
      waiting += fibers[i].state == HOST_AT_WAVE_BARRIER;
    }
    if (group_live && waiting == group_live) {
      for (size_t i = g; i < end; ++i) fibers[i].state = HOST_READY;
      released = true;
    }
  }
  return released;
}

// Run `body` (one GPU thread's work) for every thread of every block of the grid; shared memory
// is filled with NaN bytes before each block, so reading what no thread staged shows.
template <typename Body>
void host_run_grid(host_dim3 grid, host_dim3 block, Body body) {
  gridDim = grid;
  blockDim = block;
  const unsigned nt = block.x * block.y * block.z;
  host_body = &body;
  host_body_call = [](void* b) { (*static_cast<Body*>(b))(); };
  std::vector<host_fiber> fibers(nt);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::memset(smem_raw, 0xff, sizeof(smem_raw));
        blockIdx = {bx, by, bz};
        for (unsigned i = 0; i < nt; ++i) {
          host_fiber& f = fibers[i];
          f.tid = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
          f.state = HOST_READY;
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = host_stack_pool.get(i, nt);
          f.ctx.uc_stack.ss_size = HOST_STACK;
          f.ctx.uc_link = &host_scheduler;
          makecontext(&f.ctx, host_fiber_main, 0);
        }
        for (;;) {
          for (auto& f : fibers) {  // each ready thread runs until it waits or returns
            if (f.state != HOST_READY) continue;
            host_current = &f;
            threadIdx = f.tid;
            swapcontext(&host_scheduler, &f.ctx);
          }
          if (std::all_of(fibers.begin(), fibers.end(),
                          [](const host_fiber& f) { return f.state == HOST_DONE; }))
            break;
          if (!host_release(fibers)) {
            std::fprintf(stderr, "host_shim: block (%u, %u, %u) deadlocked at its barriers\n", bx, by, bz);
            std::abort();
          }
        }
      }
  host_current = nullptr;
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
