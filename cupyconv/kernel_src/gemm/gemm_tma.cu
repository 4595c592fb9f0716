// Dense GEMM on Hopper (sm_90a), fed by TMA: C[M, N] = A[M, K] @ B[K, N] for T = __half or
// cc::bf16, fp32 accumulation, C row-major with leading dimension ldc (elements).
//
// Operands arrive as tensor maps (cupyconv/_gemm/tma.py encodes them with the driver): A either
// row-major [M, K] (A_KMAJOR = 1, boxes of BK x BM) or stored [K, M] (A_KMAJOR = 0: MN-major
// for wgmma, BM / 64 boxes of 64 m x BK k); B either stored [N, K] (B_KMAJOR = 1, boxes
// BK x BN) or row-major [K, N] (B_KMAJOR = 0: MN-major, BN / 64 boxes of 64 n x BK k).
//
// Split-K (splits > 1; backward-weight's long k = pixels over a small output): the work units
// are (part, tile) pairs, part-major, and part p sums k slices [p per, (p + 1) per) with per =
// ceil(slices / splits) (the host makes every part non-empty); it stores its fp32 sums to
// ws[p][M][N], which splitk_reduce.cu adds in part order (bitwise repeatable).
// Every box is 128 bytes wide with the 128-byte swizzle, the layout wgmma reads through
// descriptors (wgmma_ss.cuh).  Edges need no code: TMA writes zeros for elements outside the
// tensor (the k tail multiplies zeros; rows past M / columns past N are computed and not stored).
//
// One block per multiprocessor (persistent: the host launches min(SMs, tiles) blocks) of 384
// threads = three warpgroups:
//  * warpgroup 0, the producer, gives most of its registers back (setmaxnreg) and one thread
//    issues the copies: for each k slice of each of the block's tiles it waits until the ring
//    stage is empty, announces the stage's bytes on its `full` barrier and starts the copies;
//  * warpgroups 1 and 2, the consumers, take the registers (setmaxnreg) and own rows 0-63 and
//    64-127 of the BM = 128 row tile: for each slice they wait on `full`, issue BK / 16 wgmma
//    m64nBNk16, and once those have read the stage (wgmma.wait_group, one batch later) each warp
//    arrives on the stage's `empty` barrier.  After a tile's last slice they store their
//    accumulators to C (converted to T) while the producer already fills the ring for the next
//    tile.
// Ring position (stage, phase) advances identically on both sides across tiles: the phase bit
// flips each time the stage index wraps.  A waiter on `full` waits for the phase of parity
// `phase`; the producer waits on `empty` for parity phase ^ 1, which a fresh barrier reports as
// complete, so the first lap of the ring starts without waiting.
//
// Tiles go in bands of GEMM_RASTER_M m tiles (m fastest within a band), tile t of the band order
// to block t % grid: the blocks resident at once cover a near-square patch of C whose A and B
// panels stay in L2.
#include "common.cuh"
#include "tma.cuh"
#include "wgmma_ss.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace cc {
namespace hopper {

// Origin (m0, n0) of tile `tile` of the band order (gemm_mainloop.cuh's block_tile, for a
// persistent grid: the tile index is a loop variable, not blockIdx).
template <int BM, int BN>
__device__ __forceinline__ void tile_origin(int tile, int tiles_m, int tiles_n, int& m0, int& n0) {
  const int per_band = GEMM_RASTER_M * tiles_n;
  const int band = tile / per_band, first = band * GEMM_RASTER_M;
  const int rows = tiles_m - first < GEMM_RASTER_M ? tiles_m - first : GEMM_RASTER_M;
  const int r = tile - band * per_band;
  m0 = (first + r % rows) * BM;
  n0 = (r / rows) * BN;
}

// Two values of a row as one store of both (c_vec: the row pitch even and the output aligned
// to two elements, checked by the host), else element by element; columns from N on are not
// stored.  T = float: split-K's partial sums.
template <typename T>
__device__ __forceinline__ void store_pair(T* p, int col, int N, float v0, float v1, bool vec) {
  if (vec && col + 1 < N) {
    if constexpr (sizeof(T) == 4) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      T t[2] = {store_as<T>(v0), store_as<T>(v1)};
      *reinterpret_cast<unsigned*>(p) = *reinterpret_cast<const unsigned*>(t);
    }
  } else {
    if (col < N) p[0] = store_as<T>(v0);
    if (col + 1 < N) p[1] = store_as<T>(v1);
  }
}

}  // namespace hopper
}  // namespace cc
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The host mirrors the shared-memory size (cupyconv/_gemm/tma.py, smem_bytes): the stages from
// a 1024-byte aligned base (up to 1008 bytes skipped), then one full and one empty barrier per
// stage.
template <typename T, int BM, int BN, int BK, int STAGES, int A_KMAJOR, int B_KMAJOR>
__global__ void __launch_bounds__(384, 1)
gemm_tma(const __grid_constant__ cc::TensorMap tma_a, const __grid_constant__ cc::TensorMap tma_b,
         T* __restrict__ C, int M, int N, int K, long long ldc, int c_vec, int splits,
         float* __restrict__ ws) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cc;
  using namespace cc::hopper;
  static_assert(BM == 128, "two consumer warpgroups of 64 rows");
  static_assert(BK * (int)sizeof(T) == 128, "slices of 128-byte rows (the swizzle's width)");
  static_assert(BN == 128 || BN == 256, "wgmma n of the consumers (WgmmaSS)");
  static_assert(STAGES >= 2, "a ring");
  constexpr int CONSUMERS = BM / 64;
  constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;  // elements
  constexpr unsigned STAGE_BYTES = (A_STAGE + B_STAGE) * sizeof(T);
  constexpr int NF = BN / 8;  // m16n8 fragments per accumulator row of a warp
  typedef SwizzledOperand<(bool)A_KMAJOR, BK> OpA;
  typedef SwizzledOperand<(bool)B_KMAJOR, BK> OpB;

  extern __shared__ __align__(1024) unsigned char dsmem[];
  unsigned char* base = dsmem + ((1024 - (smem_u32(dsmem) & 1023)) & 1023);
  T* As = reinterpret_cast<T*>(base);
  T* Bs = As + STAGES * A_STAGE;
  unsigned long long* full = reinterpret_cast<unsigned long long*>(Bs + STAGES * B_STAGE);
  unsigned long long* empty = full + STAGES;

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n, slices = (K + BK - 1) / BK;
  const int per = (slices + splits - 1) / splits, units = tiles * splits;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);                  // the producer's arrive.expect_tx
      mbar_init(&empty[s], CONSUMERS * 4);     // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();  // (the last block-wide barrier: the roles below never meet again)

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    release_registers<40>();
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&tma_a);
      prefetch_tensor_map(&tma_b);
      int stage = 0;
      unsigned phase = 0;
      for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
        int m0, n0;
        tile_origin<BM, BN>(unit % tiles, tiles_m, tiles_n, m0, n0);
        const int kb = unit / tiles * per, ke = min(slices, kb + per);
        for (int kt = kb; kt < ke; ++kt) {
          mbar_wait(&empty[stage], phase ^ 1);
          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
          const int k0 = kt * BK;
          T* a = As + stage * A_STAGE;
          if constexpr (A_KMAJOR) {
            tma_load_2d(a, &tma_a, &full[stage], k0, m0);
          } else {
#pragma unroll
            for (int j = 0; j < BM / 64; ++j)  // 64-m boxes, one per consumer warpgroup
              tma_load_2d(a + j * 64 * BK, &tma_a, &full[stage], m0 + 64 * j, k0);
          }
          T* b = Bs + stage * B_STAGE;
          if constexpr (B_KMAJOR) {
            tma_load_2d(b, &tma_b, &full[stage], k0, n0);
          } else {
#pragma unroll
            for (int j = 0; j < BN / 64; ++j)  // 64-n boxes, BK * 128 bytes apart (OpB::LBO)
              tma_load_2d(b + j * 64 * BK, &tma_b, &full[stage], n0 + 64 * j, k0);
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // ---------------------------------------------------------------- consumers
    claim_registers<232>();
    const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the tile
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    // Descriptors of stage 0; a stage further is its size further in the address field (16-byte
    // units), which never carries out of its 14 bits: shared memory ends below 2^18 bytes.
    const unsigned long long da0 = OpA::desc(As + cw * 64 * BK), db0 = OpB::desc(Bs);
    float d[NF][4];
#pragma unroll
    for (int j = 0; j < NF; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[j][e] = 0.0f;
    int stage = 0;
    unsigned phase = 0;
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
      int m0, n0;
      tile_origin<BM, BN>(unit % tiles, tiles_m, tiles_n, m0, n0);
      const int part = unit / tiles, kb = part * per, ke = min(slices, kb + per);
      int held = -1;  // the stage whose wgmma batch is still in flight
      for (int kt = kb; kt < ke; ++kt) {
        mbar_wait(&full[stage], phase);
        const unsigned long long da = da0 + stage * (A_STAGE * sizeof(T) / 16);
        const unsigned long long db = db0 + stage * (B_STAGE * sizeof(T) / 16);
        wgmma_fence();
        touch_accumulators(d);
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks)  // the unit's first instruction starts from zero
          WgmmaSS<BN, T>::template run<OpA::TRANS, OpB::TRANS>(
              d, da + OpA::K16_STEP * ks, db + OpB::K16_STEP * ks, ((kt - kb) | ks) != 0);
        wgmma_commit();
        touch_accumulators(d);
        wgmma_wait<1>();  // the previous batch has read its stage: hand that stage back
        if (held >= 0 && lane == 0) mbar_arrive(&empty[held]);
        held = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      touch_accumulators(d);
      if (held >= 0 && lane == 0) mbar_arrive(&empty[held]);

      // Epilogue: each thread's fragment rows r and r + 8, column pairs 8 j + 2 (lane % 4).
      const int r = m0 + cw * 64 + warp * 16 + lane / 4;
      const int c = n0 + 2 * (lane % 4);
      const bool vec = c_vec != 0;
      float* part_ws = splits > 1 ? ws + (long long)part * M * N : nullptr;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = r + 8 * h;
        if (row < M) {
          if (part_ws != nullptr) {  // (N even: float2 stores, 8-byte aligned; the host checks)
            float* out = part_ws + (long long)row * N;
#pragma unroll
            for (int j = 0; j < NF; ++j) {
              const int col = c + 8 * j;
              if (col < N) store_pair(out + col, col, N, d[j][2 * h], d[j][2 * h + 1], vec);
            }
          } else {
            T* out = C + row * ldc;
#pragma unroll
            for (int j = 0; j < NF; ++j) {
              const int col = c + 8 * j;
              if (col < N) store_pair(out + col, col, N, d[j][2 * h], d[j][2 * h + 1], vec);
            }
          }
        }
      }
    }
  }
#else
  CC_TRAP();  // sm_90a only: the host launches it on compute capability 9.0 alone
#endif
}
