// The one tiled GEMM main loop: C[BM x BN] += A[BM x K] * B[K x BN] for one thread block.
//
// Shared memory holds two k-slices (double buffering) of A and B, both stored k-major ([BK][BM] and
// [BK][BN]) so that every thread reads its TM rows / TN columns as 16-byte vectors.  Each thread
// keeps a TM x TN register tile of accumulators, split into 4-wide chunks spread BM/(TM/4) apart:
// the chunk layout makes the vector reads of a warp conflict-free.  Operands reach shared memory
// through *loaders* (loaders.cuh), which know the view (dense matrix, implicit im2col, ...) and
// prefetch the next k-slice into registers while the current one is multiplied.
#pragma once
#include "common.cuh"

// Blocks per multiprocessor the compiler must fit (a register cap): a module may override it.
#ifndef CC_MIN_BLOCKS
#define CC_MIN_BLOCKS 2
#endif

namespace cc {

template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  // 4 elements of padding keep rows 16-byte aligned and spread the transposed loader stores
  // over all banks.
  static constexpr int LDA = BM + 4, LDB = BN + 4;
  static constexpr int SMEM_A = 2 * BK * LDA, SMEM_B = 2 * BK * LDB;
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4-wide chunks");
  static_assert(BK % 4 == 0, "k-slices are loaded as 4-vectors");
};

// Four consecutive accumulator-type values from shared memory, as one or two 16-byte reads.
__device__ __forceinline__ void lds4(const float* p, float* v) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void lds4(const double* p, double* v) {
  const double2 a = *reinterpret_cast<const double2*>(p);
  const double2 b = *reinterpret_cast<const double2*>(p + 2);
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}

// Row (in the block tile) of a thread's accumulator row i: chunk i / 4, element i % 4.
template <int BLOCK, int TILE>
__device__ __forceinline__ int tile_offset(int lane, int i) {
  return (i / 4) * (BLOCK / (TILE / 4)) + lane * 4 + (i % 4);
}

// The first row and column (m0, n0) of this block's tile, the grid being (m tiles, n tiles, ..).
// Blocks start in launch order, x fastest: taken as they are, a wave of resident blocks would
// cover a few n tiles down the whole m range, and read every row panel of A from DRAM once per
// wave.  Instead the tiles go in bands of GEMM_RASTER_M m tiles, m fastest within a band: a wave
// covers a near-square patch, whose A and B panels stay in L2 while its blocks share them.
template <int BM, int BN>
__device__ __forceinline__ void block_tile(int& m0, int& n0) {
  const long long tiles_m = gridDim.x, tiles_n = gridDim.y;
  const long long linear = blockIdx.y * tiles_m + blockIdx.x;
  const long long per_band = GEMM_RASTER_M * tiles_n;
  const long long band = linear / per_band, first = band * GEMM_RASTER_M;
  const long long rows = tiles_m - first < GEMM_RASTER_M ? tiles_m - first : GEMM_RASTER_M;
  const long long r = linear - band * per_band;
  m0 = (int)(first + r % rows) * BM;
  n0 = (int)(r / rows) * BN;
}

// Multiplies the k range [kb, ke) (kb a multiple of BK; the loaders' K is ke).
template <typename Cfg, typename A, typename ALoader, typename BLoader>
__device__ __forceinline__ void gemm_mainloop(ALoader& la, BLoader& lb, int kb, int ke,
                                              A (&acc)[Cfg::TM][Cfg::TN], A* smem) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN;
  A* As = smem;
  A* Bs = smem + Cfg::SMEM_A;
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = A(0);

  const int ktiles = (ke - kb + BK - 1) / BK;
  la.begin(kb);
  lb.begin(kb);
  la.load();
  lb.load();
  la.store(As);
  lb.store(Bs);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    // Global loads of the next slice are issued before the math on this one, so their latency
    // hides behind it; they land in registers and go to the other buffer afterwards.
    if (kt + 1 < ktiles) {
      la.load();
      lb.load();
    }
    const A* as = As + cur * BK * Cfg::LDA + ty * 4;
    const A* bs = Bs + cur * BK * Cfg::LDB + tx * 4;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      A a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM / 4; ++i) lds4(as + k * Cfg::LDA + i * (BM / (TM / 4)), a + 4 * i);
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) lds4(bs + k * Cfg::LDB + j * (BN / (TN / 4)), b + 4 * j);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    // The other buffer was last read before the previous barrier, so it is free to overwrite.
    if (kt + 1 < ktiles) {
      la.store(As + (cur ^ 1) * BK * Cfg::LDA);
      lb.store(Bs + (cur ^ 1) * BK * Cfg::LDB);
    }
    __syncthreads();
  }
}

}  // namespace cc
