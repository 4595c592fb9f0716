// GEMM on Hopper (sm_90a), fed by TMA: C[M, N] = A[M, K] @ B[K, N] for T = __half or cc::bf16,
// or T = float with TF32 products (A_MODE 1 or 2 and B_KMAJOR = 1 only: TF32 wgmma reads both
// operands K-major), fp32 accumulation, C row-major with leading dimension ldc (elements); A
// dense, or a convolution's implicit im2col matrix.  A k slice is 128 bytes of each row: BK = 64
// of a 16-bit type, 32 floats.
//
// Operands arrive as tensor maps (cupyconv/_gemm/tma.py encodes them with the driver).  A is
//  * A_MODE = 1: row-major [M, K], boxes of BK x BM;
//  * A_MODE = 0: stored [K, M] (MN-major for wgmma), BM / 64 boxes of 64 m x BK k;
//  * A_MODE = 2: the implicit im2col matrix of a channels-last activation x[N][H][W][C] (a
//    convolution's forward, M = output pixels, K = taps x channel blocks of BK): an im2col box
//    of BM pixels x BK channels per k slice, the tap as TMA's filter offsets (geo, below).
//  * A_MODE = 3: as 0 (backward-weight's dy [P][K_out] read as dy^T), with B the implicit im2col
//    matrix of x (below).
// B either stored [N, K] (B_KMAJOR = 1, boxes BK x BN) or row-major [K, N] (B_KMAJOR = 0:
// MN-major, BN / 64 boxes of 64 n x BK k); with A_MODE = 2 it is the weight as a 3-D map, a
// box of one tap (so the channels past the last block are zeros on both sides, never the next
// tap's weights: a zero times an infinite weight would be NaN): the forward's w[N][taps][C]
// (B_KMAJOR = 1) or backward-data's w[C][taps][N] (B_KMAJOR = 0, read tap-flipped).  With
// A_MODE = 3 (backward-weight, B_KMAJOR = 0) B is im2col(x)[P, taps x C] with K = P, the output
// pixels, and N = taps x C (C a multiple of 64): per k slice, BN / 64 im2col boxes of BK pixels
// x 64 channels, one tap each (MN-major: a box's rows are pixels, 64 channels wide).
//
// Split-K (splits > 1; backward-weight's long k = pixels over a small output): the work units
// are (part, tile) pairs, part-major, and part p sums k slices [p per, (p + 1) per) with per =
// ceil(slices / splits) (the host makes every part non-empty); it stores its fp32 sums to
// ws[p][M][N], which splitk_reduce.cu adds in part order (bitwise repeatable).  With no C
// (C == nullptr, one part) the fp32 sums are the result: ws[M][N], unrounded (the few-channel
// backward-data's column matrix, which col2im_rows then sums per input element).
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
//    accumulators to C (converted to T, through each warp's staging rows: store_warp_rows)
//    while the producer already fills the ring for the next tile.
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

// The convolution geometry of A_MODE = 2 and 3 (zeros in the others; cupyconv/_gemm/tma.py,
// IM2COL_GEOMETRY, mirrors the layout): the output plane, stride, padding and dilation (rows,
// columns), the filter's width, the channel blocks of BK per tap, and which weight tap a
// window tap multiplies: wtap0 + wtap_step * tap (0, 1 for the forward; taps - 1, -1 for
// backward-data, a forward over dy with the filter turned half a turn).
struct Im2colGeometry {
  int oh, ow, sh, sw, ph, pw, dh, dw, kw, cblocks, wtap0, wtap_step;
  // Where C's rows go (A_MODE = 2): row (image, oy, ox) of the oh x ow plane at C + image
  // out_image + oy out_row + ox out_col elements, a strided view of a larger array (a stride
  // phase's rows of dx); out_col = 0: row r at C + r ldc, as in the other modes.
  int out_image, out_row, out_col;
};

// The offset of C's row r (elements; see Im2colGeometry's out_* fields).
__device__ __forceinline__ long long out_row_offset(const Im2colGeometry& geo, int r,
                                                    long long ldc) {
  if (geo.out_col == 0) return (long long)r * ldc;
  const int plane = geo.oh * geo.ow;
  const int image = r / plane, rem = r - image * plane, oy = rem / geo.ow;
  return (long long)image * geo.out_image + (long long)oy * geo.out_row +
         (long long)(rem - oy * geo.ow) * geo.out_col;
}

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

// The loads of k slice `kt` of the tile at (m0, n0) into one ring stage (a: A's box, b: B's),
// all completing on `bar`.  (img, h0, w0): the first output pixel of A_MODE = 2's tile or of
// A_MODE = 3's slice as the input position of its window's top-left tap (first_pixel).
template <typename T, int BM, int BN, int BK, int A_MODE, int B_KMAJOR>
__device__ __forceinline__ void load_slice(T* a, T* b, const TensorMap* map_a,
                                           const TensorMap* map_b, unsigned long long* bar,
                                           int kt, int m0, int n0, int N,
                                           const Im2colGeometry& geo, int img, int h0, int w0) {
  const int k0 = kt * BK;
  if constexpr (A_MODE == 3) {
    // B: the slice's BK output pixels (first at img, h0, w0) x 64 channels of the tap of each
    // 64-column block of the tile.  Blocks past N (the last tile's) read the last block again:
    // computed, never stored.
#pragma unroll
    for (int j = 0; j < BN / 64; ++j) {
      const int nb = min(n0 / 64 + j, N / 64 - 1);
      const int tap = nb / geo.cblocks, c0 = (nb - tap * geo.cblocks) * 64;
      const int ty = tap / geo.kw, tx = tap - ty * geo.kw;
      tma_load_im2col_4d(b + j * 64 * BK, map_b, bar, c0, w0, h0, img,
                         (unsigned short)(tx * geo.dw), (unsigned short)(ty * geo.dh));
    }
#pragma unroll
    for (int j = 0; j < BM / 64; ++j)  // dy^T: 64-m boxes, one per consumer warpgroup
      tma_load_2d(a + j * 64 * BK, map_a, bar, m0 + 64 * j, k0);
    return;
  } else if constexpr (A_MODE == 2) {
    const int tap = kt / geo.cblocks, c0 = (kt - tap * geo.cblocks) * BK;
    const int ty = tap / geo.kw, tx = tap - ty * geo.kw;
    tma_load_im2col_4d(a, map_a, bar, c0, w0, h0, img, (unsigned short)(tx * geo.dw),
                       (unsigned short)(ty * geo.dh));
    const int wtap = geo.wtap0 + geo.wtap_step * tap;
    if constexpr (B_KMAJOR) {  // the forward's w[N][taps][K]: BK of one tap's K for BN rows
      tma_load_3d(b, map_b, bar, c0, wtap, n0);
    } else {  // backward-data's w[K][taps][N]: BN / 64 boxes of 64 n for BK rows of one tap
#pragma unroll
      for (int j = 0; j < BN / 64; ++j)
        tma_load_3d(b + j * 64 * BK, map_b, bar, n0 + 64 * j, wtap, c0);
    }
    return;
  } else if constexpr (A_MODE == 1) {
    tma_load_2d(a, map_a, bar, k0, m0);
  } else {
#pragma unroll
    for (int j = 0; j < BM / 64; ++j)  // 64-m boxes, one per consumer warpgroup
      tma_load_2d(a + j * 64 * BK, map_a, bar, m0 + 64 * j, k0);
  }
  if constexpr (B_KMAJOR) {
    tma_load_2d(b, map_b, bar, k0, n0);
  } else {
#pragma unroll
    for (int j = 0; j < BN / 64; ++j)  // 64-n boxes, BK * 128 bytes apart (OpB::LBO)
      tma_load_2d(b + j * 64 * BK, map_b, bar, n0 + 64 * j, k0);
  }
}

// A_MODE = 2: output pixel m0 (image, row, column of the oh x ow plane) as the image and the
// input position (h0, w0) of its window's top-left tap (A_MODE = 3: the k slice's first pixel).
__device__ __forceinline__ void first_pixel(const Im2colGeometry& geo, int m0, int& img, int& h0,
                                            int& w0) {
  const int plane = geo.oh * geo.ow;
  img = m0 / plane;
  const int rem = m0 - img * plane, oy = rem / geo.ow;
  h0 = oy * geo.sh - geo.ph;
  w0 = (rem - oy * geo.ow) * geo.sw - geo.pw;
}

// Split-K's partial sums: two values of a row as one float2 store where `vec` (N even: the
// workspace rows are 8-byte aligned), else one by one; columns from N on are not stored.
__device__ __forceinline__ void store_pair(float* p, int col, int N, float v0, float v1,
                                           bool vec) {
  if (vec && col + 1 < N) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    if (col < N) p[0] = v0;
    if (col + 1 < N) p[1] = v1;
  }
}

// One consumer warp's 16 accumulator rows to C, through its private staging buffer `stage`
// (16 x EPI_COLS elements of T), EPI_COLS columns per round (the tile's BN = 8 NF where that is
// fewer: the 64-column tile stages half rows).  Stored straight from the
// fragments, a warp's 4-byte pairs would touch eight rows per instruction, 16 bytes of each
// (half-used sectors); staged, every global store is 16 lanes x 16 bytes of one row.  The pairs
// go in with the 16-byte chunk index XOR (row % 8), so the eight rows of one shared store fall
// in distinct banks, and the chunks come out conflict-free too (eight lanes read eight
// distinct chunks of one row).  `vec16`: C's rows take 16-byte stores (pitch and address, the
// host checks); else each chunk is stored element by element.  Rows from M on and columns
// from N on are not stored.
constexpr int EPI_COLS = 128;
// The staging columns a consumer warp takes: none for TF32's fp32 result (stored from the
// fragments: its pairs are 8 bytes, a row's four lanes one 32-byte sector).
template <typename T>
constexpr int epilogue_cols() { return sizeof(T) == 2 ? EPI_COLS : 0; }

template <typename T, int NF>
__device__ __forceinline__ void store_warp_rows(const float (&d)[NF][4], T* stage, T* C,
                                                long long ldc, int row0, int col0, int M, int N,
                                                bool vec16, int lane, const Im2colGeometry& geo) {
  constexpr int CHUNKS = NF < EPI_COLS / 8 ? NF : EPI_COLS / 8;  // 16-byte chunks per row
  static_assert(sizeof(T) == 2 && NF % CHUNKS == 0 && 32 % CHUNKS == 0,
                "16-bit rows of whole rounds, a round's row read by 32 / CHUNKS lanes' rows");
#pragma unroll
  for (int round = 0; round < NF / CHUNKS; ++round) {
    __syncwarp();  // (the previous round's reads are done)
#pragma unroll
    for (int jj = 0; jj < CHUNKS; ++jj) {
      const int j = round * CHUNKS + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = lane / 4 + 8 * h;
        T pair[2] = {store_as<T>(d[j][2 * h]), store_as<T>(d[j][2 * h + 1])};
        *reinterpret_cast<unsigned*>(stage + row * EPI_COLS + (jj ^ (row & 7)) * 8 +
                                     2 * (lane % 4)) = *reinterpret_cast<const unsigned*>(pair);
      }
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 * CHUNKS / 32; ++it) {
      const int row = it * (32 / CHUNKS) + lane / CHUNKS, chunk = lane % CHUNKS;
      const int grow = row0 + row, col = col0 + round * CHUNKS * 8 + chunk * 8;
      if (grow >= M || col >= N) continue;
      const T* src = stage + row * EPI_COLS + (chunk ^ (row & 7)) * 8;
      T* dst = C + out_row_offset(geo, grow, ldc) + col;
      if (vec16 && col + 8 <= N) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (col + e < N) dst[e] = src[e];
      }
    }
  }
}

}  // namespace hopper
}  // namespace cc
#endif  // __CUDA_ARCH_FEAT_SM90_ALL


// The host mirrors the shared-memory size (cupyconv/_gemm/tma.py, smem_bytes): the stages from
// a 1024-byte aligned base (up to 1008 bytes skipped), the consumer warps' epilogue buffers
// (BM / 16 warps x 16 rows x epilogue_cols<T>() elements), then one full and one empty barrier
// per stage.
// c_vec: the widest aligned store, in elements, that the rows written take (the host checks
// pitch and address): 8 (16 bytes) or less for C; for split-K's workspace 2 where N is even.
template <typename T, int BM, int BN, int BK, int STAGES, int A_MODE, int B_KMAJOR>
__global__ void __launch_bounds__(384, 1)
gemm_tma(const __grid_constant__ cc::TensorMap tma_a, const __grid_constant__ cc::TensorMap tma_b,
         T* __restrict__ C, int M, int N, int K, long long ldc, int c_vec, int splits,
         float* __restrict__ ws, const Im2colGeometry geo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cc;
  using namespace cc::hopper;
  static_assert(BM == 128, "two consumer warpgroups of 64 rows");
  static_assert(BK * (int)sizeof(T) == 128, "slices of 128-byte rows (the swizzle's width)");
  static_assert(sizeof(T) == 2 || ((A_MODE == 1 || A_MODE == 2) && B_KMAJOR),
                "TF32 takes K-major operands only");
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma n of the consumers (WgmmaSS)");
  static_assert(STAGES >= 2, "a ring");
  constexpr int CONSUMERS = BM / 64;
  constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;  // elements
  constexpr unsigned STAGE_BYTES = (A_STAGE + B_STAGE) * sizeof(T);
  constexpr int NF = BN / 8;  // m16n8 fragments per accumulator row of a warp
  static_assert(A_MODE != 3 || !B_KMAJOR, "backward-weight's im2col B is MN-major");
  typedef SwizzledOperand<A_MODE == 1 || A_MODE == 2, BK> OpA;  // (0 and 3: MN-major)
  typedef SwizzledOperand<(bool)B_KMAJOR, BK> OpB;

  extern __shared__ __align__(1024) unsigned char dsmem[];
  unsigned char* base = dsmem + ((1024 - (smem_u32(dsmem) & 1023)) & 1023);
  T* As = reinterpret_cast<T*>(base);
  T* Bs = As + STAGES * A_STAGE;
  T* Es = Bs + STAGES * B_STAGE;  // the consumer warps' epilogue buffers, 16 x EPI_COLS each
  unsigned long long* full =
      reinterpret_cast<unsigned long long*>(Es + BM / 16 * 16 * epilogue_cols<T>());
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
        int img = 0, h0 = 0, w0 = 0;
        if constexpr (A_MODE == 2) first_pixel(geo, m0, img, h0, w0);
        for (int kt = kb; kt < ke; ++kt) {
          if constexpr (A_MODE == 3) first_pixel(geo, kt * BK, img, h0, w0);
          mbar_wait(&empty[stage], phase ^ 1);
          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
          load_slice<T, BM, BN, BK, A_MODE, B_KMAJOR>(As + stage * A_STAGE, Bs + stage * B_STAGE,
                                                      &tma_a, &tma_b, &full[stage], kt, m0, n0,
                                                      N, geo, img, h0, w0);
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
        for (int ks = 0; ks < BK / WgmmaSS<BN, T>::K_STEP; ++ks)  // (the unit's first one
          WgmmaSS<BN, T>::template run<OpA::TRANS, OpB::TRANS>(    //  starts from zero)
              d, da + OpA::K_STEP_DESC * ks, db + OpB::K_STEP_DESC * ks, ((kt - kb) | ks) != 0);
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

      // Epilogue: the warp's rows 16 warp .. 16 warp + 15 of its warpgroup's 64.
      const int row0 = m0 + cw * 64 + warp * 16;
      if (splits > 1 || C == nullptr) {
        // fp32 partial sums to ws[part], straight from the fragments: each thread's rows r and
        // r + 8, column pairs 8 j + 2 (lane % 4).  (Pairs: N even, float2 stores 8-byte
        // aligned; the host checks.)
        float* part_ws = ws + (long long)part * M * N;
        const int c = n0 + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + lane / 4 + 8 * h;
          if (row < M) {
            float* out = part_ws + (long long)row * N;
#pragma unroll
            for (int j = 0; j < NF; ++j) {
              const int col = c + 8 * j;
              if (col < N) store_pair(out + col, col, N, d[j][2 * h], d[j][2 * h + 1],
                                      c_vec >= 2);
            }
          }
        }
      } else if constexpr (sizeof(T) == 4) {
        // TF32's fp32 result: each thread's pairs straight to C (a warp's 4 lanes of a row
        // cover 32 contiguous bytes, one sector), as the partial sums above; rows placed as
        // the 16-bit epilogue places them (out_row_offset)
        const int c = n0 + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + lane / 4 + 8 * h;
          if (row < M) {
            float* out = reinterpret_cast<float*>(C) + out_row_offset(geo, row, ldc);
#pragma unroll
            for (int j = 0; j < NF; ++j) {
              const int col = c + 8 * j;
              if (col < N) store_pair(out + col, col, N, d[j][2 * h], d[j][2 * h + 1],
                                      c_vec >= 2);
            }
          }
        }
      } else {
        store_warp_rows(d, Es + (cw * 4 + warp) * 16 * EPI_COLS, C, ldc, row0, n0, M, N,
                        c_vec >= 8, lane, geo);
      }
    }
  }
#else
  CC_TRAP();  // sm_90a only: the host launches it on compute capability 9.0 alone
#endif
}
