// Backward-weight's second stage: out[e] = the sum over chunks c of part[c * count + e], for
// e < count, in an order fixed by (chunks, count) alone, so the result is bitwise reproducible.
//
// The split-K reduce (gemm/splitk_reduce.cu) gives each element one thread that walks every
// chunk in turn: with hundreds of chunks and a few thousand filter taps that is a few blocks
// whose threads wait on one dependent chain of loads each (~35 us on an H100 for 523 chunks of
// 144 x 9 taps).  Here a block takes 32 elements (threadIdx.x, coalesced) and splits the chunks
// into blockDim.y contiguous segments (threadIdx.y); a thread sums its segment with four
// independent partial sums (four loads in flight), and thread row 0 adds the segments in order.
#include "common.cuh"

// CHUNK_SUM_SEGMENTS (most segments, blockDim.y) comes from KERNEL_CONSTANTS.
#ifndef CHUNK_SUM_SEGMENTS
#error "compile with the defines of cupyconv._core.kernels.KERNEL_CONSTANTS"
#endif

template <typename T>
__global__ void __launch_bounds__(32 * CHUNK_SUM_SEGMENTS)
chunk_sum(const typename cc::acc_type<T>::type* __restrict__ part, T* __restrict__ out,
          int chunks, int count) {
  typedef typename cc::acc_type<T>::type A;
  __shared__ A seg_sums[CHUNK_SUM_SEGMENTS][33];
  const int e = blockIdx.x * 32 + threadIdx.x;
  const int per = (chunks + (int)blockDim.y - 1) / (int)blockDim.y;
  const int c_begin = threadIdx.y * per, c_end = min(chunks, c_begin + per);
  A s0 = A(0), s1 = A(0), s2 = A(0), s3 = A(0);
  if (e < count) {
    const A* p = part + e;
    int c = c_begin;
    for (; c + 4 <= c_end; c += 4) {
      s0 += p[(cc::index_t)c * count];
      s1 += p[(cc::index_t)(c + 1) * count];
      s2 += p[(cc::index_t)(c + 2) * count];
      s3 += p[(cc::index_t)(c + 3) * count];
    }
    for (; c < c_end; ++c) s0 += p[(cc::index_t)c * count];
  }
  seg_sums[threadIdx.y][threadIdx.x] = (s0 + s1) + (s2 + s3);
  __syncthreads();
  if (threadIdx.y == 0 && e < count) {
    A total = A(0);
    for (int y = 0; y < (int)blockDim.y; ++y) total += seg_sums[y][threadIdx.x];
    out[e] = cc::store_as<T>(total);
  }
}
