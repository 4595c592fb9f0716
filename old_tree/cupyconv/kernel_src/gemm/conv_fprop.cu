// Implicit-GEMM forward convolution: the main loop with the implicit-im2col loader for A (no
// buffer) and a dense loader for the weights.  Per group g = blockIdx.z:
//   y[(n, out pixel), g*Kg + j] = sum_k A[(n, pixel), k] * w[g*Kg + j, k],  k = (tap, c),
// with w (K, taps, Cg) (channels-last weights as they are), or with w_cf, channels-first weights
// (K, Cg, taps) read in that order by the B loader's k split (no transposed copy).
// The epilogue adds the bias and the residual z (y's shape and strides) and applies the activation
// (activation.cuh) before the single store; with split-K the reduction does (splitk_reduce.cu).
// y's output rows are contiguous pixels: channels-last y is (M, K) row-major; channels-first y
// has image stride ysn and channel stride ysc (a slab of rows of a larger output when the host
// splits a problem of more than 2^30 rows into launches).  y's layout (y_cl) is x's, or
// channels-first from channels-last x: the host stages channels-first problems through a
// channels-last copy of x where that feeds the tensor cores' multistage copies.
#include "loaders.cuh"
#include "gemm_mma.cuh"
#include "epilogue.cuh"
#include "splitk.cuh"

template <typename T, int BM, int BN, int BK, int TM, int TN, int CL, int MATH>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), CC_MIN_BLOCKS)
conv_fprop(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
           const T* __restrict__ bias, const T* __restrict__ z, int has_bias, int has_z, int act,
           int N, int K, int w_vec, int w_cf, int x_vec, int y_cl,
           int c_vec, int Cg, int D, int H, int W, int OD, int OH, int OW, int KD, int KH, int KW,
           int SD, int SH, int SW, int DD, int DH, int DW, int PD, int PH, int PW,
           cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw,
           cc::index_t ysn, cc::index_t ysc, int groups, int splits,
           typename cc::acc_type<T>::type* __restrict__ ws) {
  typedef typename cc::acc_type<T>::type Acc;
  typedef cc::TileConfig<BM, BN, BK, TM, TN> Cfg;
  typedef cc::MainLoop<T, Cfg, MATH> Loop;
  __shared__ __align__(16) unsigned char smem[Loop::SMEM_BYTES];
  extern __shared__ __align__(16) unsigned char dsmem[];  // the tensor-core loops' stages
  const cc::ConvShape shape = {Cg, D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW,
                               PD, PH, PW, xsn, xsc, xsd, xsh, xsw};
  const int g = blockIdx.z / splits, part = blockIdx.z % splits, Kg = K / groups;
  const int pixels = OD * OH * OW;
  const int M = N * pixels, Kgemm = Cg * KD * KH * KW;
  int m0, n0;
  cc::block_tile<BM, BN>(m0, n0);
  int kb, ke;
  cc::split_range<BK>(Kgemm, splits, part, kb, ke);

  cc::Im2colLoader<T, typename Loop::Reg, BM, BK, Cfg::THREADS, (bool)CL, Loop::LDA, Loop::ROW_K> la;
  la.init(x + (cc::index_t)g * Cg * xsc, &shape, m0, M, x_vec);
  la.K = ke;
  cc::DenseLoader<T, typename Loop::Reg, BN, BK, Cfg::THREADS, true, Loop::LDB, Loop::ROW_K> lb;
  lb.base = w + ((cc::index_t)g * Kg + n0) * Kgemm;
  lb.rs = Kgemm; lb.ks = 1; lb.rows = Kg - n0; lb.K = ke; lb.vec = w_vec;
  if (w_cf) { lb.kdiv = Cg; lb.ks = KD * KH * KW; lb.khs = 1; lb.vec = false; }

  Acc acc[TM][TN];
  Loop::run(la, lb, kb, ke, acc, smem, dsmem);
  if (splits == 1) {
    const cc::OutMap map = y_cl ? cc::OutMap{M, 0, K, 1} : cc::OutMap{pixels, ysn, 1, ysc};
    const cc::index_t y_off = y_cl ? (cc::index_t)g * Kg : (cc::index_t)g * Kg * ysc;
    const cc::Epilogue<T> ep = {z + y_off, has_z, act};
    cc::store_tile<Cfg>(acc, y + y_off, bias + g * Kg, has_bias, ep, m0, n0, M, Kg, map, c_vec);
  } else {
    cc::store_partial<Cfg>(acc, ws, part, g, groups, m0, n0, M, Kg, y_cl,
                          y_cl ? Kg % 4 == 0 : M % 4 == 0);
  }
}
