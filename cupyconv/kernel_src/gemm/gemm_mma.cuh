// The tensor-core main loop: the same contract as gemm_mainloop (loaders in, a TM x TN register
// tile of accumulators out, in the SIMT loop's layout), so every kernel keeps its loaders, its
// epilogue (store_tile) and its deterministic split-K (store_partial) unchanged.
//
// Operand staging.  The loaders keep their slice in registers as the storage type (16-bit values
// are not widened) and write it to shared memory row-major in k: A as [BM][LDS], B (its
// transpose) as [BN][LDS], LDS = BK plus 16 bytes of padding, which puts the eight 16-byte rows
// that one ldmatrix phase reads on eight distinct bank groups (row pitch 80 bytes for a 64-byte
// slice: 20 words, and 20 * r mod 32 covers 0, 4, ..., 28 for r < 8).  Two slices are resident:
// the next one is fetched into registers while the current one is multiplied (as in the SIMT
// loop).  float32 under TF32 is rounded to nearest (cvt.rna) as it is written to shared memory,
// so every input is rounded once, as cuBLAS and cuDNN do.
//
// Math.  Warps tile the block as WARPS_M x WARPS_N; a warp owns WM x WN = MF x NF fragments of
// 16 x 8 accumulators (fp32).  Per 32-byte k-step (16 halves or 8 floats) a warp loads its A
// fragments and pairs of B fragments with ldmatrix.x4 and issues MF * NF mma.sync: m16n8k16 for
// fp16/bf16, m16n8k8 for TF32.  On AMD CDNA the same staging feeds MFMA (16x16x16, one wave of
// 64 lanes per warp tile); targets with neither instruction never select this loop (the host
// plan checks the device) and compile it to a trap.
//
// Hand-off.  After the last slice the fragments go through shared memory in TM / 4 passes (one
// per 4-row chunk of the SIMT layout, BM / (TM / 4) rows each) and come back as acc[TM][TN].
#pragma once
#include "gemm_mainloop.cuh"
#include "loaders.cuh"

namespace cc {

// Storage type of an operand in shared memory when it feeds TF32 math: a float that the loaders'
// store rounds to TF32 (10 explicit mantissa bits) on the way in.
struct tf32 {
  float v;
};
__device__ __forceinline__ unsigned round_tf32_bits(const unsigned bits) {
#if defined(__CUDACC__)
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(__uint_as_float(bits)));
  return u;
#else
  return bits;  // AMD: no TF32 path is selected; kept total so the template compiles everywhere
#endif
}
template <> __device__ __forceinline__ tf32 store_as<tf32, float>(const float x) {
  tf32 r;
  r.v = __uint_as_float(round_tf32_bits(__float_as_uint(x)));
  return r;
}

// Main-loop kinds, the kernels' MATH template argument: SIMT; mma.sync (or MFMA) on 16-bit
// storage; mma.sync on float32 rounded to TF32; and the Hopper loop, on 16-bit storage or on
// float32 rounded to TF32 (wgmma where the operands allow 16-byte copies -- k-major ones only for
// TF32 --, the mma.sync register-staged loop for the others).
enum MathKind { MATH_SIMT = 0, MATH_MMA = 1, MATH_TF32 = 2, MATH_WGMMA = 3, MATH_WGMMA_TF32 = 4 };

// Registers and shared-memory element type of each kind: SIMT widens to the accumulator type;
// MMA keeps 16-bit storage; TF32 loads floats and stores rounded tf32.
template <typename T, int MATH> struct MathTypes;
template <typename T> struct MathTypes<T, MATH_SIMT> {
  typedef typename acc_type<T>::type Reg;
  typedef typename acc_type<T>::type Smem;
};
template <typename T> struct MathTypes<T, MATH_MMA> {
  typedef T Reg;
  typedef T Smem;
};
template <typename T> struct MathTypes<T, MATH_WGMMA> : MathTypes<T, MATH_MMA> {};
template <typename T> struct MathTypes<T, MATH_TF32> {
  typedef float Reg;
  typedef tf32 Smem;
};
template <typename T> struct MathTypes<T, MATH_WGMMA_TF32> : MathTypes<T, MATH_TF32> {};

// The hand-off of accumulator fragments to the SIMT register layout acc[TM][TN], through shared
// memory in TM / 4 passes, one per 4-row chunk of the SIMT layout (PASS_ROWS = BM / (TM / 4) rows
// of the block tile each, at a pitch of LDC floats).  `write(stage, r0)` puts this thread's
// accumulators of rows [r0, r0 + PASS_ROWS) at stage[(row - r0) * LDC + col].  The caller has
// synchronized: `smem` is free.
template <typename Cfg>
struct HandOff {
  static constexpr int PASS_ROWS = Cfg::BM / (Cfg::TM / 4), LDC = Cfg::BN + 4;
  static constexpr int SMEM_BYTES = PASS_ROWS * LDC * 4;
  static_assert(Cfg::BM % PASS_ROWS == 0 && PASS_ROWS % 4 == 0, "hand-off passes");

  template <typename Write>
  static __device__ __forceinline__ void run(float (&acc)[Cfg::TM][Cfg::TN], void* smem,
                                             const Write& write) {
    float* stage = reinterpret_cast<float*>(smem);
    const int tx = threadIdx.x % (Cfg::BN / Cfg::TN), ty = threadIdx.x / (Cfg::BN / Cfg::TN);
#pragma unroll
    for (int pass = 0; pass < Cfg::TM / 4; ++pass) {
      write(stage, pass * PASS_ROWS);
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jc = 0; jc < Cfg::TN / 4; ++jc)
          lds4(stage + (ty * 4 + i) * LDC + tile_offset<Cfg::BN, Cfg::TN>(tx, 4 * jc),
               &acc[4 * pass + i][4 * jc]);
      __syncthreads();
    }
  }
};

// NVIDIA accumulator fragments c[i][j] of 16 x 8 (mma.sync's m16n8 layout, which wgmma's
// accumulators repeat along n) into acc: fragment (i, j) covers rows row0 + 16 i + lane / 4 (and
// + 8), columns col0 + 8 j + 2 (lane % 4) (and + 1).
template <typename Cfg, int MF, int NF>
__device__ __forceinline__ void hand_off_m16n8(const float (&c)[MF][NF][4], int row0, int col0,
                                               float (&acc)[Cfg::TM][Cfg::TN], void* smem) {
  typedef HandOff<Cfg> H;
  const int lane = threadIdx.x % 32;  // NVIDIA only (mma.sync / wgmma fragments): 32-lane warps
  H::run(acc, smem, [&](float* stage, int r0) {
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j) {
        const int row = row0 + i * 16 + lane / 4 - r0, col = col0 + j * 8 + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rr = row + 8 * h;
          if (rr >= 0 && rr < H::PASS_ROWS)
            *reinterpret_cast<float2*>(stage + rr * H::LDC + col) =
                make_float2(c[i][j][2 * h], c[i][j][2 * h + 1]);
        }
      }
  });
}

template <typename Cfg, typename S>
struct MmaTile {
  static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN;
  static constexpr int THREADS = Cfg::THREADS;
#if defined(__CUDACC__)
  static constexpr int LANES = 32, FRAG_M = 16, FRAG_N = 8;
#else
  // MFMA is a wave64 instruction of CDNA (gfx9), whose waves are 64 lanes (asserted below where
  // MFMA exists); on RDNA (wave32) this loop is never selected and only compiles to a trap.
  static constexpr int LANES = 64, FRAG_M = 16, FRAG_N = 16;
#endif
  static constexpr int WARPS = THREADS / LANES;
  static constexpr int WARPS_N = (BN >= 128 && WARPS >= 4) ? 4 : (WARPS >= 2 ? 2 : 1);
  static constexpr int WARPS_M = WARPS / WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MF = WM / FRAG_M, NF = WN / FRAG_N;
  static constexpr int KSTEP = 32 / (int)sizeof(S);  // elements per 32-byte k-step
  static constexpr int LDS = BK + 16 / (int)sizeof(S);  // row pitch: 16 bytes of padding
  static constexpr int SMEM_BYTES_LOOP = CC_MMA_STAGES * (BM + BN) * LDS * (int)sizeof(S);
  static constexpr int SMEM_BYTES = cmax(SMEM_BYTES_LOOP, HandOff<Cfg>::SMEM_BYTES);
  static_assert(WARPS * LANES == THREADS && WARPS_M * WARPS_N == WARPS, "warp layout");
  static_assert(WM % FRAG_M == 0 && WN % (2 * FRAG_N) == 0 && MF >= 1, "warp tile of whole fragments");
  static_assert(BK % KSTEP == 0, "k-slices of whole k-steps");
};

#if defined(__CUDACC__)
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// d += a * b for one 16 x 8 fragment: per-type instruction.
template <typename S> struct Mma;
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<bf16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<tf32> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
// Whether the shared-memory type has a tensor-core instruction here (all of them do on NVIDIA
// sm_80+, the only targets the host selects it for).
template <typename S> struct HasMatrixOp { static constexpr bool value = true; };
#else
// AMD CDNA: 16x16x16 MFMA, fp32 accumulation; four values per lane.
typedef float mfma_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 mfma_f16x4 __attribute__((ext_vector_type(4)));
typedef short mfma_i16x4 __attribute__((ext_vector_type(4)));
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__)
#define CC_MFMA_F16 1
#endif
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define CC_MFMA_BF16 1
#endif
#if defined(CC_MFMA_F16)
static_assert(CC_WARP_SIZE == 64, "MFMA targets run 64-lane waves (MmaTile::LANES)");
#endif
template <typename S> struct HasMatrixOp { static constexpr bool value = false; };
#if defined(CC_MFMA_F16)
template <> struct HasMatrixOp<__half> { static constexpr bool value = true; };
#endif
#if defined(CC_MFMA_BF16)
template <> struct HasMatrixOp<bf16> { static constexpr bool value = true; };
#endif
// One 16x16x16 MFMA step, d += a * b, with a and b as four 16-bit values each (8 bytes).
template <typename S> struct Mfma {
  static __device__ __forceinline__ mfma_f32x4 run(const uint2, const uint2, mfma_f32x4 c) {
    CC_TRAP();  // never selected on this target (HasMatrixOp is false)
    return c;
  }
};
#if defined(CC_MFMA_F16)
template <> struct Mfma<__half> {
  static __device__ __forceinline__ mfma_f32x4 run(const uint2 a, const uint2 b, mfma_f32x4 c) {
    mfma_f16x4 av, bv;
    __builtin_memcpy(&av, &a, 8);
    __builtin_memcpy(&bv, &b, 8);
    return __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, c, 0, 0, 0);
  }
};
#endif
#if defined(CC_MFMA_BF16)
template <> struct Mfma<bf16> {
  static __device__ __forceinline__ mfma_f32x4 run(const uint2 a, const uint2 b, mfma_f32x4 c) {
    mfma_i16x4 av, bv;
    __builtin_memcpy(&av, &a, 8);
    __builtin_memcpy(&bv, &b, 8);
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
  }
};
#endif
#endif

// One warp's share of the block tile: its accumulator fragments, the multiply of one staged
// k-slice, and the hand-off of the fragments to the SIMT register layout.
template <typename Cfg, typename S>
struct MmaWarp {
  typedef MmaTile<Cfg, S> L;
  static constexpr int MF = L::MF, NF = L::NF, LDS = L::LDS;
  float c[MF][NF][4];
  int lane, wm, wn, a_off, b_off;

  __device__ __forceinline__ MmaWarp() {
    lane = threadIdx.x % L::LANES;
    const int warp = threadIdx.x / L::LANES;
    wm = warp / L::WARPS_N;
    wn = warp % L::WARPS_N;
#if defined(__CUDACC__)
    // ldmatrix row addresses: A fragments take rows lane % 16 and the 16-byte k half lane / 16;
    // a pair of B fragments takes rows (lane % 8) + 8 * (lane / 16) and k half (lane / 8) % 2.
    constexpr int HALF = 16 / (int)sizeof(S);  // elements in 16 bytes
    a_off = (wm * L::WM + lane % 16) * LDS + (lane / 16) * HALF;
    b_off = (wn * L::WN + lane % 8 + 8 * (lane / 16)) * LDS + ((lane / 8) % 2) * HALF;
#else
    // MFMA 16x16x16: lane l feeds row l % 16 with k (l / 16) * 4 .. + 3 of both operands
    a_off = (wm * L::WM + lane % 16) * LDS + (lane / 16) * 4;
    b_off = (wn * L::WN + lane % 16) * LDS + (lane / 16) * 4;
#endif
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[i][j][e] = 0.0f;
  }

  // c += the k-slice staged at As ([BM][LDS]) and Bs ([BN][LDS]).
  __device__ __forceinline__ void multiply(const S* As, const S* Bs) {
    const S* as = As + a_off;
    const S* bs = Bs + b_off;
#pragma unroll
    for (int ks = 0; ks < L::BK; ks += L::KSTEP) {
#if defined(__CUDACC__)
      unsigned a[MF][4], b[NF][2];
#pragma unroll
      for (int i = 0; i < MF; ++i) ldmatrix_x4(a[i], as + i * 16 * LDS + ks);
#pragma unroll
      for (int j = 0; j < NF; j += 2) {
        unsigned r[4];
        ldmatrix_x4(r, bs + j * 8 * LDS + ks);
        b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
      }
      if (sizeof(S) == 4) {  // TF32: round operands copied raw (cp.async) to nearest; idempotent
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) a[i][e] = round_tf32_bits(a[i][e]);
#pragma unroll
        for (int j = 0; j < NF; ++j) {
          b[j][0] = round_tf32_bits(b[j][0]);
          b[j][1] = round_tf32_bits(b[j][1]);
        }
      }
#pragma unroll
      for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j) Mma<S>::run(c[i][j], a[i], b[j]);
#else
      // one k-step of 32 bytes is two 16-element MFMA steps for 16-bit types
#pragma unroll
      for (int kk = 0; kk < L::KSTEP; kk += 16) {
        uint2 a[MF], b[NF];
#pragma unroll
        for (int i = 0; i < MF; ++i) a[i] = *reinterpret_cast<const uint2*>(as + i * 16 * LDS + ks + kk);
#pragma unroll
        for (int j = 0; j < NF; ++j) b[j] = *reinterpret_cast<const uint2*>(bs + j * 16 * LDS + ks + kk);
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
          for (int j = 0; j < NF; ++j) {
            mfma_f32x4 v = {c[i][j][0], c[i][j][1], c[i][j][2], c[i][j][3]};
            v = Mfma<S>::run(a[i], b[j], v);
            c[i][j][0] = v[0]; c[i][j][1] = v[1]; c[i][j][2] = v[2]; c[i][j][3] = v[3];
          }
      }
#endif
    }
  }

  // The fragments into acc in the SIMT layout (HandOff).
  __device__ __forceinline__ void hand_off(float (&acc)[Cfg::TM][Cfg::TN], void* smem) const {
#if defined(__CUDACC__)
    hand_off_m16n8<Cfg>(c, wm * L::WM, wn * L::WN, acc, smem);
#else
    typedef HandOff<Cfg> H;
    H::run(acc, smem, [&](float* stage, int r0) {
#pragma unroll
      for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j) {
          // MFMA 16x16 accumulators: column lane % 16, rows 4 * (lane / 16) .. + 3
          const int col = wn * L::WN + j * 16 + lane % 16;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int rr = wm * L::WM + i * 16 + 4 * (lane / 16) + e - r0;
            if (rr >= 0 && rr < H::PASS_ROWS) stage[rr * H::LDC + col] = c[i][j][e];
          }
        }
    });
#endif
  }
};

// The register-staged tensor-core loop over k range [kb, ke): two resident slices, the next one
// fetched into registers by the loaders while the current one is multiplied.  Any loader.
template <typename Cfg, typename S, typename ALoader, typename BLoader>
__device__ __forceinline__ void gemm_mainloop_mma(ALoader& la, BLoader& lb, int kb, int ke,
                                                  float (&acc)[Cfg::TM][Cfg::TN], void* smem) {
  typedef MmaTile<Cfg, S> L;
  S* As = reinterpret_cast<S*>(smem);
  S* Bs = As + 2 * L::BM * L::LDS;
  MmaWarp<Cfg, S> w;
  const int ktiles = (ke - kb + L::BK - 1) / L::BK;
  la.begin(kb);
  lb.begin(kb);
  la.load();
  lb.load();
  la.store(As);
  lb.store(Bs);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    if (kt + 1 < ktiles) {
      la.load();
      lb.load();
    }
    w.multiply(As + cur * L::BM * L::LDS, Bs + cur * L::BN * L::LDS);
    if (kt + 1 < ktiles) {
      la.store(As + (cur ^ 1) * L::BM * L::LDS);
      lb.store(Bs + (cur ^ 1) * L::BN * L::LDS);
    }
    __syncthreads();
  }
  w.hand_off(acc, smem);
}

// The multistage tensor-core loop: loaders that copy 16-byte chunks straight to shared memory
// (`issue`: cp.async on NVIDIA, zero-filled outside the operand) keep CC_MMA_STAGES - 1 slices in
// flight while one is multiplied, so global latency hides behind several slices of math.  For
// operands whose chunks the host proved aligned and whole (loaders' `async_ok`).
template <typename Cfg, typename S, typename ALoader, typename BLoader>
__device__ __forceinline__ void gemm_mainloop_mma_async(ALoader& la, BLoader& lb, int kb, int ke,
                                                        float (&acc)[Cfg::TM][Cfg::TN], void* smem) {
  typedef MmaTile<Cfg, S> L;
  constexpr int STAGES = CC_MMA_STAGES;
  constexpr int A_STAGE = L::BM * L::LDS, B_STAGE = L::BN * L::LDS;
  S* As = reinterpret_cast<S*>(smem);
  S* Bs = As + STAGES * A_STAGE;
  MmaWarp<Cfg, S> w;
  const int ktiles = (ke - kb + L::BK - 1) / L::BK;
  la.begin_async(kb);
  lb.begin_async(kb);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) {
      la.template issue<PaddedRows<L::LDS>>(As + s * A_STAGE);
      lb.template issue<PaddedRows<L::LDS>>(Bs + s * B_STAGE);
    }
    cp_async_commit();  // (empty groups keep the count uniform)
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 2>();  // slice kt has landed (this thread's part) ...
    __syncthreads();              // ... everyone's; and slice kt - 1's buffer is free
    const int next = kt + STAGES - 1;
    if (next < ktiles) {
      la.template issue<PaddedRows<L::LDS>>(As + (next % STAGES) * A_STAGE);
      lb.template issue<PaddedRows<L::LDS>>(Bs + (next % STAGES) * B_STAGE);
    }
    cp_async_commit();
    w.multiply(As + (kt % STAGES) * A_STAGE, Bs + (kt % STAGES) * B_STAGE);
  }
  cp_async_wait<0>();
  __syncthreads();
  w.hand_off(acc, smem);
}

// ---------------------------------------------------------------------------------------------
// The Hopper loop (sm_90a: NVRTC compiles for it when the device is compute capability 9.0).
//
// Warpgroups (4 warps, 128 threads) tile the block as WG_M x WG_N, each owning a 64 x WN
// accumulator tile in registers (WN = BN / WG_N, the instruction's n).  Slices are lines of
// exactly 128 bytes (BK = 64 halves, or 32 floats under TF32) in the 128-byte swizzled layouts
// (loaders.cuh), k-contiguous rows or, for 16-bit operands whose rows are contiguous
// (backward-weight, a row-major B), row-contiguous k (wgmma's transposed operands), which wgmma
// reads straight from shared memory through matrix descriptors: no ldmatrix, no operand
// registers.  TF32 slices are rounded in place once landed (one more barrier per slice), and
// MN-major TF32 slices transposed to K-major there too (StageTranspose: three barriers per
// slice).  The loaders' 16-byte cp.async copies keep STAGES - 2 slices in flight; one batch of
// wgmma (a slice: BK / 16 instructions) stays in flight across the next slice's barrier, so the
// tensor cores never wait for the copies' issue.  Slice kt is written to the buffer that batch
// kt - 2 read: every warpgroup finished that batch (wait_group 1 in iteration kt - 1) before the
// barrier of iteration kt.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CC_WGMMA 1
#ifndef CC_WGMMA_STAGES
#define CC_WGMMA_STAGES 4  // slices resident (the host's kernels.WGMMA_STAGES per module)
#endif

template <bool C, typename A, typename B> struct Pick { typedef A type; };
template <typename A, typename B> struct Pick<false, A, B> { typedef B type; };

// One operand's side of the Hopper loop, by the orientation of its loader's 16-byte chunks.
// K-major (SwizzledK128): rows of 64 k; 8-row groups 1024 bytes apart (the descriptor's stride
// offset), the leading offset unused; a 16-deep k-step is 32 bytes further.  MN-major
// (SwizzledMN128): atoms of 64 rows x BK k, one 128-byte line per k, BK * 128 bytes apart (the
// leading offset); 8-k groups 1024 bytes apart; a k-step is 16 lines further.  Either way the
// rows from row0 (a multiple of 64) start row0 * BK elements into the stage.  Descriptor fields
// are in 16-byte units; bits 62-63 = 1 select the 128-byte swizzle.
template <typename S, int BK, bool KMAJOR>
struct WgmmaOperand {
  typedef typename Pick<KMAJOR, SwizzledK128<S>, SwizzledMN128<S, BK>>::type Slot;
  static constexpr int TRANS = KMAJOR ? 0 : 1;
  static constexpr unsigned long long LBO = KMAJOR ? 16 : BK * 128, SBO = 1024;
  static constexpr unsigned long long STEP = KMAJOR ? 32 / 16 : 16 * 128 / 16;
  static __device__ __forceinline__ unsigned long long desc(const void* p) {
    const unsigned long long addr = smem_addr(p);
    return ((addr & 0x3FFFF) >> 4) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32) | (1ull << 62);
  }
};
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// cp.async writes are generic-proxy writes; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// The accumulators are written by the tensor cores between an mma_async and its wait: this empty
// asm makes the compiler treat them as changed here, so no read of them moves before the wait.
template <int NF>
__device__ __forceinline__ void fence_accumulators(float (&d)[NF][4]) {
#pragma unroll
  for (int j = 0; j < NF; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// d (64 x N, fp32) += A (64 x 16, descriptor da) * B (16 x N, descriptor db); TA / TB: the
// operand is MN-major (transposed) rather than K-major.
#define CC_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define CC_WGMMA_N32(TY)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {"                \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"      \
               "}, %16, %17, p, 1, 1, %19, %20;\n}\n"                                          \
               : CC_D4(0), CC_D4(1), CC_D4(2), CC_D4(3)                                    \
               : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))
#define CC_WGMMA_N64(TY)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {"                \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
               "%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"                                       \
               : CC_D4(0), CC_D4(1), CC_D4(2), CC_D4(3), CC_D4(4), CC_D4(5), CC_D4(6),     \
                 CC_D4(7)                                                                  \
               : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))
#define CC_WGMMA_N128(TY)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {"               \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
               "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
               "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
               "%61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"                             \
               : CC_D4(0), CC_D4(1), CC_D4(2), CC_D4(3), CC_D4(4), CC_D4(5), CC_D4(6),     \
                 CC_D4(7), CC_D4(8), CC_D4(9), CC_D4(10), CC_D4(11), CC_D4(12), CC_D4(13), \
                 CC_D4(14), CC_D4(15)                                                      \
               : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))

// TF32 (k = 8 per instruction, the same 32 bytes of k): K-major operands only, so the PTX form
// has no transpose immediates.
#define CC_WGMMA_TF32_N32                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {"                     \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"      \
               "}, %16, %17, p, 1, 1;\n}\n"                                                  \
               : CC_D4(0), CC_D4(1), CC_D4(2), CC_D4(3)                                    \
               : "l"(da), "l"(db), "r"(1))
#define CC_WGMMA_TF32_N64                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"                     \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
               "%31}, %32, %33, p, 1, 1;\n}\n"                                               \
               : CC_D4(0), CC_D4(1), CC_D4(2), CC_D4(3), CC_D4(4), CC_D4(5), CC_D4(6),     \
                 CC_D4(7)                                                                  \
               : "l"(da), "l"(db), "r"(1))
#define CC_WGMMA_TF32_N128                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"                    \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
               "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
               "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
               "%61, %62, %63}, %64, %65, p, 1, 1;\n}\n"                                     \
               : CC_D4(0), CC_D4(1), CC_D4(2), CC_D4(3), CC_D4(4), CC_D4(5), CC_D4(6),     \
                 CC_D4(7), CC_D4(8), CC_D4(9), CC_D4(10), CC_D4(11), CC_D4(12), CC_D4(13), \
                 CC_D4(14), CC_D4(15)                                                      \
               : "l"(da), "l"(db), "r"(1))

template <int N, typename S> struct Wgmma;
#define CC_WGMMA_SPECIALIZE(N, S, TY)                                                        \
  template <> struct Wgmma<N, S> {                                                           \
    template <int TA, int TB>                                                                \
    static __device__ __forceinline__ void run(float (&d)[N / 8][4], unsigned long long da,  \
                                               unsigned long long db) {                     \
      CC_WGMMA_N##N(TY);                                                                     \
    }                                                                                        \
  };
CC_WGMMA_SPECIALIZE(32, __half, "f16")
CC_WGMMA_SPECIALIZE(64, __half, "f16")
CC_WGMMA_SPECIALIZE(128, __half, "f16")
CC_WGMMA_SPECIALIZE(32, bf16, "bf16")
CC_WGMMA_SPECIALIZE(64, bf16, "bf16")
CC_WGMMA_SPECIALIZE(128, bf16, "bf16")
#undef CC_WGMMA_SPECIALIZE
#define CC_WGMMA_SPECIALIZE_TF32(N)                                                          \
  template <> struct Wgmma<N, tf32> {                                                        \
    template <int TA, int TB>                                                                \
    static __device__ __forceinline__ void run(float (&d)[N / 8][4], unsigned long long da,  \
                                               unsigned long long db) {                     \
      static_assert(TA == 0 && TB == 0, "TF32 wgmma reads K-major operands only");           \
      CC_WGMMA_TF32_N##N;                                                                    \
    }                                                                                        \
  };
CC_WGMMA_SPECIALIZE_TF32(32)
CC_WGMMA_SPECIALIZE_TF32(64)
CC_WGMMA_SPECIALIZE_TF32(128)
#undef CC_WGMMA_SPECIALIZE_TF32
#undef CC_D4

template <typename Cfg, typename S>
struct WgmmaTile {
  static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  static constexpr int WG = Cfg::THREADS / 128, WG_M = BM / 64, WG_N = WG / WG_M, WN = BN / WG_N;
  static constexpr int STAGES = CC_WGMMA_STAGES, KSTEP = 32 / (int)sizeof(S);  // k per instruction
  static constexpr bool TF32 = sizeof(S) == 4;
  static constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;  // elements
  // the stages from a 1024-byte aligned base (up to 1008 bytes of it skipped), or the hand-off
  static constexpr int SMEM_BYTES =
      cmax(STAGES * (A_STAGE + B_STAGE) * (int)sizeof(S) + 1024, HandOff<Cfg>::SMEM_BYTES);
  static_assert(BK * (int)sizeof(S) == 128, "slices of 128-byte rows (the swizzle's width)");
  static_assert(WG * 128 == Cfg::THREADS && BM % 64 == 0 && WG % WG_M == 0 && WN % 8 == 0,
                "warpgroup layout");
  static_assert(STAGES >= 3, "two slices in flight behind one batch of wgmma");
  // Whether loaders of these orientations can feed it: an MN-major tile of a warpgroup must
  // start on a 64-row atom (A's always do: 64 rows per warpgroup).  TF32 wgmma reads K-major
  // operands only: MN-major TF32 slices are transposed in place once landed (StageTranspose).
  template <typename ALoader, typename BLoader>
  static constexpr bool feeds() {
    return TF32 || BLoader::KMAJOR || WN % 64 == 0;
  }
};

// TF32: round the floats of a landed stage (n of them, a multiple of 4 * THREADS) to nearest in
// place, as the mma.sync loop rounds its fragments: the tensor cores would read them as they are.
template <int N, int THREADS>
__device__ __forceinline__ void round_tf32_stage(tf32* s) {
  static_assert(N % (4 * THREADS) == 0, "stage of whole 16-byte chunks per thread");
  uint4* v = reinterpret_cast<uint4*>(s);
#pragma unroll
  for (int i = 0; i < N / (4 * THREADS); ++i) {
    uint4 u = v[threadIdx.x + i * THREADS];
    u.x = round_tf32_bits(u.x); u.y = round_tf32_bits(u.y);
    u.z = round_tf32_bits(u.z); u.w = round_tf32_bits(u.w);
    v[threadIdx.x + i * THREADS] = u;
  }
}

// TF32 slices that land MN-major (rows contiguous: backward-weight's dy and transposed im2col)
// are rewritten K-major in place, rounded on the way (PTX has no transposed TF32 wgmma).  Each
// thread moves 4 x 4 blocks: four 16-byte loads of 4 rows at k .. k + 3 from the SwizzledMN128
// layout, four 16-byte stores of one row's 4 k to the SwizzledK128 one.  Block b of a 32-row
// atom takes row group l = b % 8 and k chunk (l + b / 8) % 8: a warp's 16-byte loads and stores
// then hit each 16-byte bank group exactly 4 times (conflict-free both ways).  In place, so a
// barrier separates every thread's loads (read_mn_blocks) from the stores (write_k_blocks).
template <int ROWS, int THREADS>
struct StageTranspose {
  static constexpr int BLOCKS = ROWS * 2, NB = (BLOCKS + THREADS - 1) / THREADS;  // BK = 32 floats
  uint4 v[NB][4];  // v[i][e]: row 4 l + e of block i, its 4 k, rounded

  __device__ __forceinline__ static void block(int b, int& row, int& k) {
    const int l = b % 8;
    row = (b / 64) * 32 + 4 * l;
    k = 4 * ((l + (b % 64) / 8) % 8);
  }
  __device__ __forceinline__ void read_mn_blocks(const tf32* s) {
    typedef SwizzledMN128<tf32, 32> From;
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      const int b = threadIdx.x + i * THREADS;
      if (BLOCKS % THREADS != 0 && b >= BLOCKS) break;
      int row, k;
      block(b, row, k);
      unsigned in[4][4];  // in[j][e]: row + e at k + j
#pragma unroll
      for (int j = 0; j < 4; ++j)
        *reinterpret_cast<uint4*>(in[j]) = *reinterpret_cast<const uint4*>(s + From::at(row, k + j));
#pragma unroll
      for (int e = 0; e < 4; ++e)
        v[i][e] = make_uint4(round_tf32_bits(in[0][e]), round_tf32_bits(in[1][e]),
                             round_tf32_bits(in[2][e]), round_tf32_bits(in[3][e]));
    }
  }
  __device__ __forceinline__ void write_k_blocks(tf32* s) const {
    typedef SwizzledK128<tf32> To;
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      const int b = threadIdx.x + i * THREADS;
      if (BLOCKS % THREADS != 0 && b >= BLOCKS) break;
      int row, k;
      block(b, row, k);
#pragma unroll
      for (int e = 0; e < 4; ++e) *reinterpret_cast<uint4*>(s + To::at(row + e, k)) = v[i][e];
    }
  }
};

template <typename Cfg, typename S, typename ALoader, typename BLoader>
__device__ __forceinline__ void gemm_mainloop_wgmma(ALoader& la, BLoader& lb, int kb, int ke,
                                                    float (&acc)[Cfg::TM][Cfg::TN], void* smem) {
  typedef WgmmaTile<Cfg, S> L;
  // How each operand's slices land (the loader's orientation) and how wgmma reads them: TF32
  // slices that land MN-major are read K-major after transpose_stage.
  constexpr bool XA = L::TF32 && !ALoader::KMAJOR, XB = L::TF32 && !BLoader::KMAJOR;
  typedef typename WgmmaOperand<S, Cfg::BK, ALoader::KMAJOR>::Slot SlotA;
  typedef typename WgmmaOperand<S, Cfg::BK, BLoader::KMAJOR>::Slot SlotB;
  typedef WgmmaOperand<S, Cfg::BK, ALoader::KMAJOR || XA> OpA;
  typedef WgmmaOperand<S, Cfg::BK, BLoader::KMAJOR || XB> OpB;
  constexpr int STAGES = L::STAGES, NF = L::WN / 8;
  unsigned char* base = reinterpret_cast<unsigned char*>(smem);
  base += (1024 - (smem_addr(base) & 1023)) & 1023;
  S* As = reinterpret_cast<S*>(base);
  S* Bs = As + STAGES * L::A_STAGE;
  const int wg = threadIdx.x / 128, wg_m = wg % L::WG_M, wg_n = wg / L::WG_M;
  const int a_off = wg_m * 64 * L::BK, b_off = wg_n * L::WN * L::BK;
  // Descriptors of stage 0; a stage further is its size further in the address field (16-byte
  // units, bits 0-13), which never carries: shared memory ends below 2^18 bytes.
  const unsigned long long da0 = OpA::desc(As + a_off), db0 = OpB::desc(Bs + b_off);
  float d[1][NF][4];  // one fragment row of m16n8 tiles per warp: hand_off_m16n8's shape
#pragma unroll
  for (int j = 0; j < NF; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[0][j][e] = 0.0f;
  const int ktiles = (ke - kb + L::BK - 1) / L::BK;
  la.begin_async(kb);
  lb.begin_async(kb);
#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < ktiles) {
      la.template issue<SlotA>(As + s * L::A_STAGE);
      lb.template issue<SlotB>(Bs + s * L::B_STAGE);
    }
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 3>();  // slice kt has landed (this thread's copies) ...
    const int next = kt + STAGES - 2;
    if constexpr (XA || XB) {     // (every thread's: transposed and rounded in place)
      __syncthreads();            // (batch kt - 2 is done too: its buffer takes slice next)
      if (next < ktiles) {
        la.template issue<SlotA>(As + (next % STAGES) * L::A_STAGE);
        lb.template issue<SlotB>(Bs + (next % STAGES) * L::B_STAGE);
      }
      cp_async_commit();
      S* a = As + (kt % STAGES) * L::A_STAGE;
      S* b = Bs + (kt % STAGES) * L::B_STAGE;
      StageTranspose<Cfg::BM, Cfg::THREADS> ta;
      StageTranspose<Cfg::BN, Cfg::THREADS> tb;
      if constexpr (XA) ta.read_mn_blocks(a);
      if constexpr (XB) tb.read_mn_blocks(b);
      __syncthreads();
      if constexpr (XA) ta.write_k_blocks(a);
      else round_tf32_stage<L::A_STAGE, Cfg::THREADS>(a);
      if constexpr (XB) tb.write_k_blocks(b);
      else round_tf32_stage<L::B_STAGE, Cfg::THREADS>(b);
      fence_proxy_async();
      __syncthreads();
    } else {
      if constexpr (L::TF32 && TF32_ROUND_STAGE) {  // (every thread's: rounded in place)
        __syncthreads();
        round_tf32_stage<L::A_STAGE, Cfg::THREADS>(As + (kt % STAGES) * L::A_STAGE);
        round_tf32_stage<L::B_STAGE, Cfg::THREADS>(Bs + (kt % STAGES) * L::B_STAGE);
      }
      fence_proxy_async();          // ... is visible to the tensor cores' reads ...
      __syncthreads();              // ... for every thread's copies; batch kt - 2 is done
      if (next < ktiles) {
        la.template issue<SlotA>(As + (next % STAGES) * L::A_STAGE);
        lb.template issue<SlotB>(Bs + (next % STAGES) * L::B_STAGE);
      }
      cp_async_commit();
    }
    const unsigned long long da = da0 + (kt % STAGES) * (L::A_STAGE * sizeof(S) / 16);
    const unsigned long long db = db0 + (kt % STAGES) * (L::B_STAGE * sizeof(S) / 16);
    wgmma_fence();
    fence_accumulators(d[0]);
#pragma unroll
    for (int ks = 0; ks < L::BK / L::KSTEP; ++ks)
      Wgmma<L::WN, S>::template run<OpA::TRANS, OpB::TRANS>(d[0], da + OpA::STEP * ks,
                                                            db + OpB::STEP * ks);
    wgmma_commit();
    fence_accumulators(d[0]);
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  fence_accumulators(d[0]);
  cp_async_wait<0>();
  __syncthreads();
  hand_off_m16n8<Cfg>(d, wg_m * 64 + (threadIdx.x % 128) / 32 * 16, wg_n * L::WN, acc, smem);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The main loop a kernel runs for storage type T and kind MATH, with the loaders' register and
// shared-memory types and layout (row-major in k for the tensor-core loop) and its shared memory.
template <typename T, typename Cfg, int MATH>
struct MainLoop {
  typedef typename MathTypes<T, MATH>::Reg Reg;
  typedef typename MathTypes<T, MATH>::Smem Smem;
  static constexpr bool ROW_K = MATH != MATH_SIMT;
  static constexpr int LDA = ROW_K ? MmaTile<Cfg, Smem>::LDS : Cfg::LDA;
  static constexpr int LDB = ROW_K ? MmaTile<Cfg, Smem>::LDS : Cfg::LDB;
  // Static shared memory of the SIMT loop; the tensor-core loops take dynamic shared memory
  // (MmaTile / WgmmaTile / HandOff SMEM_BYTES: the host's mma_smem_bytes).
  static constexpr int SMEM_BYTES = ROW_K ? 16 : (Cfg::SMEM_A + Cfg::SMEM_B) * (int)sizeof(Reg);

  // The loop for these loaders: a multistage one (wgmma on Hopper, else cp.async + mma.sync for
  // k-major chunks) where both operands allow 16-byte copies, else the register-staged one.
  template <typename ALoader, typename BLoader, typename Acc>
  static __device__ __forceinline__ void run(ALoader& la, BLoader& lb, int kb, int ke,
                                             Acc (&acc)[Cfg::TM][Cfg::TN], void* smem,
                                             void* dsmem) {
    if constexpr (MATH == MATH_SIMT) {
      gemm_mainloop<Cfg>(la, lb, kb, ke, acc, reinterpret_cast<Acc*>(smem));
    } else if constexpr (MATH == MATH_WGMMA || MATH == MATH_WGMMA_TF32) {
#if defined(CC_WGMMA)
      if constexpr (WgmmaTile<Cfg, Smem>::template feeds<ALoader, BLoader>()) {
        if (la.async_ok() && lb.async_ok()) {
          gemm_mainloop_wgmma<Cfg, Smem>(la, lb, kb, ke, acc, dsmem);
          return;
        }
      }
      gemm_mainloop_mma<Cfg, Smem>(la, lb, kb, ke, acc, dsmem);
#else
      // The Hopper loop's kernels launch on compute capability 9.0 alone (precision.gemm_math;
      // an explicit plan cannot move them elsewhere: precision.runs_instead), so other targets
      // compile a trap rather than the mma.sync fallback, ~2 s of NVRTC per module for sm_80.
      CC_TRAP();
#endif
    } else if constexpr (HasMatrixOp<Smem>::value) {
      if constexpr (ALoader::KMAJOR && BLoader::KMAJOR) {  // padded rows hold k-chunks only
        if (la.async_ok() && lb.async_ok()) {
          gemm_mainloop_mma_async<Cfg, Smem>(la, lb, kb, ke, acc, dsmem);
          return;
        }
      }
      gemm_mainloop_mma<Cfg, Smem>(la, lb, kb, ke, acc, dsmem);
    } else {
      CC_TRAP();  // the host never selects a tensor-core kernel on such a target
    }
  }
};

}  // namespace cc
