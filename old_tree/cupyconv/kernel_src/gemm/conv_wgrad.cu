// Implicit-GEMM backward-weight, channels-last: per group g = blockIdx.z / splits,
//   dw[g*Kg + k, (tap, c)] = sum over output pixels P of dy[P, g*Kg + k] * x[P's input at tap, g*Cg + c]
// A = dy^T through a dense loader (rows = the Kg output channels, contiguous), B = the transposed
// implicit im2col of x (Im2colTLoader): no buffer.  k = N * pixels is long and the output small,
// so split-K (splitk.cuh) usually spreads it over the GPU.
#include "loaders.cuh"
#include "gemm_mma.cuh"
#include "epilogue.cuh"
#include "splitk.cuh"

template <typename T, int BM, int BN, int BK, int TM, int TN, int MATH>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), CC_MIN_BLOCKS)
conv_wgrad(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dw,
           int N, int K, int groups, int dy_vec, int x_vec, int c_vec,
           int Cg, int D, int H, int W, int OD, int OH, int OW, int KD, int KH, int KW,
           int SD, int SH, int SW, int DD, int DH, int DW, int PD, int PH, int PW,
           cc::index_t xsn, cc::index_t xsc, cc::index_t xsd, cc::index_t xsh, cc::index_t xsw,
           int splits, typename cc::acc_type<T>::type* __restrict__ ws) {
  typedef typename cc::acc_type<T>::type Acc;
  typedef cc::TileConfig<BM, BN, BK, TM, TN> Cfg;
  typedef cc::MainLoop<T, Cfg, MATH> Loop;
  __shared__ __align__(16) unsigned char smem[Loop::SMEM_BYTES];
  extern __shared__ __align__(16) unsigned char dsmem[];  // the tensor-core loops' stages
  const cc::ConvShape shape = {Cg, D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW,
                               PD, PH, PW, xsn, xsc, xsd, xsh, xsw};
  const int g = blockIdx.z / splits, part = blockIdx.z % splits, Kg = K / groups;
  const int pixels = N * OD * OH * OW, Ncols = Cg * KD * KH * KW;
  int m0, n0;
  cc::block_tile<BM, BN>(m0, n0);
  int kb, ke;
  cc::split_range<BK>(pixels, splits, part, kb, ke);

  // A[k, P] = dy[P, g*Kg + k]: rows contiguous, k (pixel) stride K
  cc::DenseLoader<T, typename Loop::Reg, BM, BK, Cfg::THREADS, false, Loop::LDA, Loop::ROW_K> la;
  la.base = dy + (cc::index_t)g * Kg + m0;
  la.rs = 1; la.ks = K; la.rows = Kg - m0; la.K = ke; la.vec = dy_vec;
  cc::Im2colTLoader<T, typename Loop::Reg, BN, BK, Cfg::THREADS, Loop::LDB, Loop::ROW_K> lb;
  lb.init(x + (cc::index_t)g * Cg * xsc, &shape, n0, Ncols - n0, x_vec);
  lb.K = ke;

  Acc acc[TM][TN];
  Loop::run(la, lb, kb, ke, acc, smem, dsmem);
  if (splits == 1) {
    const cc::OutMap map = {Kg, 0, Ncols, 1};
    const cc::Epilogue<T> plain = {dw, 0, CC_ACT_NONE};
    cc::store_tile<Cfg>(acc, dw + (cc::index_t)g * Kg * Ncols, dw, 0, plain, m0, n0, Kg, Ncols, map,
                        c_vec);
  } else {
    cc::store_partial<Cfg>(acc, ws, part, g, groups, m0, n0, Kg, Ncols, true, Ncols % 4 == 0);
  }
}
