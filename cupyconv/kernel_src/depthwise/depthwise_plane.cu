// Depthwise forward convolution, channels-first, stride S = 1 (filters of at most KWB columns) or
// S = 2 in both H and W (square KF x KF filters), unit dilation, float16 and bfloat16 (computed in
// float32), float32, float64: every (image, output channel) plane is a 2-D correlation of its
// input plane (channel k / mult) with its own filter (k), zero padded:
//
//   y[n, k, oh, ow] = bias[k]
//                     + sum_{kh, kw} x[n, k / mult, S oh - PH + kh, S ow - PW + kw] * w[k, kh, kw]
//
// It runs the row walk of plane_walk.cuh (no staged window, no block barrier after the taps, loads
// always in flight), which the tile kernel in depthwise.cu cannot: that one stages windows behind
// barriers.  The walk's unit of work is an item: RY output rows x one strip of 4 * QW columns of
// one plane.  Depthwise planes are narrow (56, 28, 14 columns in MobileNets), so a warp is split
// into GW = 32 / QW lane groups, each walking its own item (lane q of a group owns columns
// 4q .. 4q+3 of the strip); a wide plane has strips of up to 128 columns, one group per warp.
// The items are numbered plane by plane (CPP items per plane); a block takes IPB consecutive items
// (rounds of its lane groups; the host makes IPB a multiple of the groups, so only the grid's
// last block has idle groups), stages the taps and biases of the planes they touch, then its
// groups walk them round by round.
//
// Strip columns start at s * 4 * QW - d, where d < 4 makes each lane's first input column a
// multiple of 4 at stride 1 (at stride 2, d = 0 and the lane's window starts E = -PW mod 4
// columns early: plane_walk.cuh), so rows load as aligned 16-byte quads; a quad outside the row
// is the zero padding (COLS_QUADS), or, when rows are not 16-byte aligned (`vec_in` false), each
// element is tested.  Stores: 4-element vectors when output quads are aligned (d == 0,
// OW % 4 == 0, aligned base: `vec_out`), otherwise through a per-warp shared buffer, read back as
// coalesced rows.
#include "plane_walk.cuh"

// Resident blocks per SM the register budget is cut for (as filter_plane's FP_MIN_BLOCKS; the
// depthwise sweep in benchmarks/notes/depthwise.md, "2026-11-23 (session 3)").  Stride 2 holds
// wider windows (and backward-weight 25 sums at 5x5): at 4 blocks (64 registers) ptxas spilled
// 36-48 bytes at 3x3 and 110-440 at 5x5.  3 blocks (80 registers; 5x5 still spills 40-190 bytes)
// measured fastest overall, 2 was faster on large 5x5 planes only
// (benchmarks/experiments/README.md: exp_depthwise_plane.py, benchmarks/notes/depthwise.md, "Session 19").
// A module define may override it.
#ifndef DP_MIN_BLOCKS
#define DP_MIN_BLOCKS(T, KWB, S) (sizeof(T) > 4 ? 2 : (S) > 1 ? 3 : (KWB) <= 8 ? 4 : 3)
#endif
// Backward-weight's: 5x5 keeps 25 sums per lane besides the windows, so 3 blocks at any stride.
#ifndef DP_WGRAD_MIN_BLOCKS
#define DP_WGRAD_MIN_BLOCKS(T, KWB, KF, S) \
  (sizeof(T) > 4 ? 2 : (KF) > 3 ? 3 : DP_MIN_BLOCKS(T, KWB, S))
#endif

// Output rows per item (RY; default: the walk's rows_per_thread).  A module define may override
// it (the host's PlanePlan.ry must match).
#ifndef DP_ROWS
#define DP_ROWS(T) (fp::rows_per_thread<T>::value)
#endif

namespace dp {
const int TW = FP_TW;  // strip width: 4 columns per lane (KERNEL_CONSTANTS)
static_assert(TW == 4 * 32, "a strip is 4 columns per lane");
const int MAX_WARPS = 8;
const int SLOTS = 32;  // most lane groups per warp (QW = 1)
}  // namespace dp

// With `flip`, the taps are the filter rotated by 180 degrees: backward-data at unit stride
// without a channel multiplier is this correlation of dy (the host's backward_data_twin).
//
// Grid: x = ceil(planes * CPP / IPB); block: 32 x warps threads.  Shared memory (the host mirrors
// it): taps SP x KH x KWB, biases SP (SP: most planes a block touches), then, without vec_out, a
// RY x 128 buffer per warp.
template <typename T, int KWB, int KF, int S, int E>
__global__ void __launch_bounds__(256, DP_MIN_BLOCKS(T, KWB, S))
depthwise_plane(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, const cc::index_t* __restrict__ prm) {
  // Scalar arguments, packed by the host into one array (launch cost: one argument).
  const int has_bias = (int)prm[0], K = (int)prm[1], mult = (int)prm[2], planes = (int)prm[3],
      H = (int)prm[4], W = (int)prm[5], OH = (int)prm[6], OW = (int)prm[7], KH_ = (int)prm[8],
      KW_ = (int)prm[9], PH = (int)prm[10], PW = (int)prm[11], QW = (int)prm[12],
      GW = (int)prm[13], strips = (int)prm[14], CPP = (int)prm[15], IPB = (int)prm[16],
      SP = (int)prm[17], d = (int)prm[18], vec_in = (int)prm[19], vec_out = (int)prm[20],
      flip = (int)prm[21];
  typedef typename cc::acc_type<T>::type A;
  const int RY = DP_ROWS(T);
  // KF > 0: a KF x KF filter fixed at compile time (the host passes the same sizes); the 3x3
  // and 5x5 walks are fully unrolled (7x7 would spill).
  const int KH = KF > 0 ? KF : KH_, KW = KF > 0 ? KF : KW_;
  const int TAPS = KH * KWB;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* const taps = reinterpret_cast<A*>(smem_raw);  // SP x KH x KWB
  A* const bvals = taps + SP * TAPS;                // SP
  A* const obuf = bvals + 4 * ((SP + 3) / 4);       // warps x RY x 128, only without vec_out
  __shared__ cc::index_t meta_base[dp::MAX_WARPS][dp::SLOTS];  // a group's output offset
  __shared__ int meta_oh[dp::MAX_WARPS][dp::SLOTS], meta_ow[dp::MAX_WARPS][dp::SLOTS];
  // Without vec_out, buffer element e of a row was written by lane e / 4 of group g = e / (4 QW),
  // column c = e - 4 QW g of that group's strip: readback[e] = g << 8 | c (a table, not
  // registers: the walk needs them).
  __shared__ int readback[dp::TW];

  // "warp": a 32-lane group (filter_plane.cu's), not the hardware warp: on AMD one (wave32) or
  // two (wave64) groups share a wave; each keeps its own obuf rows and meta slots and CC_SYNCWARP
  // orders them within the wave (common.cuh), so both wave sizes are right.
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nthreads = blockDim.x;
  const int groups = (nthreads >> 5) * GW;
  const int i0 = blockIdx.x * IPB, i1 = min(i0 + IPB, planes * CPP);  // (< 2^31: host)
  const int p0 = i0 / CPP, np = (i1 - 1) / CPP - p0 + 1;  // the planes these items touch
  for (int i = tid; i < np * TAPS; i += nthreads) {  // (flip: the filter rotated 180 degrees)
    const int pp = i / TAPS, t = i - pp * TAPS, r = t / KWB, c = t - r * KWB;
    const int wr = flip ? KH - 1 - r : r, wc = flip ? KW - 1 - c : c;
    const cc::index_t tap = (cc::index_t)((p0 + pp) % K) * KH * KW + wr * KW + wc;
    taps[i] = c < KW ? cc::load_as<A>(w[tap]) : A(0);
  }
  for (int i = tid; i < np; i += nthreads)
    bvals[i] = has_bias ? cc::load_as<A>(bias[(p0 + i) % K]) : A(0);
  for (int e = tid; e < dp::TW; e += nthreads) {
    const int g = (e >> 2) / QW;
    readback[e] = g << 8 | (e - 4 * QW * g);
  }
  __syncthreads();

  const int grp = lane / QW, q = lane - grp * QW;
  const bool lane_on = grp < GW;
  const int cols = vec_in ? fp::COLS_QUADS : fp::COLS_ELEMENTS;

  for (int base = i0; base < i1; base += groups) {  // block-uniform
    const int item = base + warp * GW + grp;
    const bool live = lane_on && item < i1;
    int pp = 0, oh0 = OH, ow0 = 0;
    A acc[RY][4];
    if (live) {
      const int plane = item / CPP, rem = item - plane * CPP;
      const int chunk = rem / strips, s = rem - chunk * strips;
      pp = plane - p0;
      oh0 = chunk * RY;
      ow0 = s * 4 * QW - d;
      const T* xp = x + (cc::index_t)((p0 + pp) / mult) * H * W;
      constexpr int NR = KF == 3 || KF == 5 ? S * (DP_ROWS(T) - 1) + KF : 0;  // unrolled walks
      fp::walk_chunk<T, A, KWB, RY, true, NR, S, E>(acc, xp, taps + pp * TAPS, S * oh0 - PH,
                                                    S * (ow0 + 4 * q) - PW - E, H, W, KH, KW,
                                                    cc::BOUNDARY_FILL, cols, A(0));
      const A b = bvals[pp];
#pragma unroll
      for (int i = 0; i < RY; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += b;
    }
    const cc::index_t obase = ((cc::index_t)(p0 + pp) * OH + oh0) * OW + ow0;
    if (vec_out) {  // ow0 and OW multiples of 4: a quad is wholly inside or outside the row
      if (live && ow0 + 4 * q < OW) {
#pragma unroll
        for (int i = 0; i < RY; ++i)
          if (oh0 + i < OH) cc::stg4(y + obase + (cc::index_t)i * OW + 4 * q, acc[i]);
      }
    } else {
      A* ob = obuf + warp * RY * dp::TW;
      if (lane_on) {
#pragma unroll
        for (int i = 0; i < RY; ++i) cc::stg4(ob + i * dp::TW + 4 * lane, acc[i]);
        if (q == 0) {
          meta_base[warp][grp] = obase;
          meta_oh[warp][grp] = live ? oh0 : OH;
          meta_ow[warp][grp] = ow0;
        }
      }
      CC_SYNCWARP();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rb = readback[lane + 32 * j], g = rb >> 8, ce = rb & 255;
        if (g < GW) {
          const int moh = meta_oh[warp][g], c = meta_ow[warp][g] + ce;
          const cc::index_t mb = meta_base[warp][g];
          if (c >= 0 && c < OW) {
#pragma unroll
            for (int i = 0; i < RY; ++i)
              if (moh + i < OH)
                y[mb + (cc::index_t)i * OW + ce] = cc::store_as<T>(ob[i * dp::TW + lane + 32 * j]);
          }
        }
      }
      CC_SYNCWARP();  // the buffer is rewritten by the next round
    }
  }
}

// Backward-weight on the same walk, for KF x KF filters fixed at compile time:
//
//   partial[chunk, k, kh, kw] = sum over the chunk's items of channel k of
//                               dy[n, k, oh, ow] * x[n, k / mult, S oh - PH + kh, S ow - PW + kw]
//
// Block (k, chunk) takes items i0 .. i0 + IPB - 1 of channel k (numbered image by image, CPP per
// plane) in rounds of its lane groups, as the forward kernel.  A lane loads its item's RY x 4 dy
// values (scalars: the strip's d shift leaves dy quads unaligned), then walks the input rows;
// input row r meets dy row i through tap row r - S i, for all KF columns of taps.  Each lane keeps
// KF x KF sums over every item it walks; the block adds them in a fixed order (shared memory, no
// atomics), and chunk_sum.cu adds the chunks in a fixed order: bitwise repeatable.
// Grid: (K, chunks); shared memory: KF * KF * blockDim.x accumulators.
template <typename T, int KWB, int KF, int S, int E>
__global__ void __launch_bounds__(256, DP_WGRAD_MIN_BLOCKS(T, KWB, KF, S))
depthwise_plane_wgrad(const T* __restrict__ x, const T* __restrict__ dy,
                      typename cc::acc_type<T>::type* __restrict__ partial,
                      const cc::index_t* __restrict__ prm) {
  static_assert(KF > 0 && KF <= KWB, "backward-weight takes a fixed square filter");
  typedef typename cc::acc_type<T>::type A;
  const int K = (int)prm[0], mult = (int)prm[1], N = (int)prm[2], H = (int)prm[3],
      W = (int)prm[4], OH = (int)prm[5], OW = (int)prm[6], PH = (int)prm[7], PW = (int)prm[8],
      QW = (int)prm[9], GW = (int)prm[10], strips = (int)prm[11], CPP = (int)prm[12],
      IPB = (int)prm[13], d = (int)prm[14], vec_in = (int)prm[15];
  const int RY = DP_ROWS(T), TAPS = KF * KF;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* const red = reinterpret_cast<A*>(smem_raw);  // TAPS x blockDim.x, then TAPS x 32
  // 32-lane groups as in the forward kernel; nothing here is warp-synchronous (the reduction
  // below uses __syncthreads and 32 is only its partition count), so any wave size is right.
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nthreads = blockDim.x;
  const int groups = (nthreads >> 5) * GW, k = blockIdx.x, chunk = blockIdx.y;
  const int i0 = chunk * IPB, i1 = min(i0 + IPB, N * CPP);
  const int grp = lane / QW, q = lane - grp * QW;
  const int cols = vec_in ? fp::COLS_QUADS : fp::COLS_ELEMENTS;
  const int C = K / mult;

  A acc[KF][KF];
#pragma unroll
  for (int a = 0; a < KF; ++a)
#pragma unroll
    for (int b = 0; b < KF; ++b) acc[a][b] = A(0);

  for (int base = i0; base < i1; base += groups) {
    const int item = base + warp * GW + grp;
    if (grp >= GW || item >= i1) continue;  // (no barrier inside this loop)
    const int n = item / CPP, rem = item - n * CPP, ch = rem / strips, s = rem - ch * strips;
    const int oh0 = ch * RY, ow0 = s * 4 * QW - d + 4 * q;
    const T* xp = x + ((cc::index_t)n * C + k / mult) * H * W;
    const T* gp = dy + ((cc::index_t)n * K + k) * OH * OW;
    // Bit 4 i + j of `live`: output (oh0 + i, ow0 + j) lies inside dy.  Outputs outside take no
    // part, rather than a zero dy: 0 times a NaN or inf of x would be NaN.  Lanes wholly inside
    // (all but the edge strips' and the last rows') skip the per-output test.
    A g[RY][4];
    unsigned live = 0;
#pragma unroll
    for (int i = 0; i < RY; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = oh0 + i, c = ow0 + j;
        const bool in = r < OH && (unsigned)c < (unsigned)OW;
        live |= (unsigned)in << (4 * i + j);
        g[i][j] = in ? cc::load_as<A>(gp[(cc::index_t)r * OW + c]) : A(0);
      }
    const bool whole = live == (1u << (4 * RY)) - 1u;
    constexpr int NR = S * (DP_ROWS(T) - 1) + KF;
    fp::walk_rows<T, A, KWB, true, NR, S, E>(xp, S * oh0 - PH, NR, S * ow0 - PW - E, H, W, KF,
                                             cc::BOUNDARY_FILL, cols, A(0),
                                             [&](int r, const fp::Window<A, KWB, S>& cur) {
#pragma unroll
      for (int i = 0; i < RY; ++i) {
        const int kh = r - S * i;
        if (kh >= 0 && kh < KF) {
          if (whole) {
#pragma unroll
            for (int kw = 0; kw < KF; ++kw)
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[kh][kw] += g[i][j] * cur[E + S * j + kw];
          } else {
#pragma unroll
            for (int kw = 0; kw < KF; ++kw)
#pragma unroll
              for (int j = 0; j < 4; ++j)
                if (live >> (4 * i + j) & 1u) acc[kh][kw] += g[i][j] * cur[E + S * j + kw];
          }
        }
      }
    });
  }

  // Block sum in a fixed order: thread sums, then 32 strided partial sums per tap, then those.
#pragma unroll
  for (int a = 0; a < KF; ++a)
#pragma unroll
    for (int b = 0; b < KF; ++b) red[(a * KF + b) * nthreads + tid] = acc[a][b];
  __syncthreads();
  A* const red2 = red + TAPS * nthreads;
  for (int u = tid; u < TAPS * 32; u += nthreads) {
    const int t = u >> 5, l = u & 31;
    A v = A(0);
    for (int m = l; m < nthreads; m += 32) v += red[t * nthreads + m];
    red2[u] = v;
  }
  __syncthreads();
  for (int t = tid; t < TAPS; t += nthreads) {
    A v = A(0);
    for (int l = 0; l < 32; ++l) v += red2[t * 32 + l];
    partial[((cc::index_t)chunk * K + k) * TAPS + t] = v;
  }
}
