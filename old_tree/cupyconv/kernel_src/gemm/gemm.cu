// Dense (batched, strided) GEMM: C[z] = act(A[z] @ B[z] + bias + Z[z]), the main loop with dense
// loaders; bias, the residual Z (C's layout) and the activation are optional (epilogue.cuh).
//
// A is M x K, B is K x N, both read through element strides; A_KCONTIG / B_KCONTIG say whether k
// is the contiguous dim of each (the loaders walk threads along it).  blockIdx.z = z * splits + s:
// batch z splits as (z / G2, z % G2) with an outer and an inner stride per operand, so plain
// batches (G2 = 1) and (image, group) batches of grouped convolutions share one kernel; s is the
// split-K part (see splitk.cuh).
#include "loaders.cuh"
#include "gemm_mma.cuh"
#include "epilogue.cuh"
#include "splitk.cuh"

template <typename T, int BM, int BN, int BK, int TM, int TN, int A_KCONTIG, int B_KCONTIG, int MATH>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), CC_MIN_BLOCKS)
gemm(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
     const T* __restrict__ bias, const T* __restrict__ Z, int has_bias, int has_z, int act,
     int M, int N, int K, int c_vec,
     cc::index_t a_rs, cc::index_t a_ks, cc::index_t b_rs, cc::index_t b_ks, int a_vec, int b_vec,
     int G2, cc::index_t a_so, cc::index_t a_si, cc::index_t b_so, cc::index_t b_si,
     cc::index_t c_so, cc::index_t c_si, cc::index_t bias_si,
     cc::index_t c_L, cc::index_t c_outer, cc::index_t c_inner, cc::index_t c_n,
     int splits, typename cc::acc_type<T>::type* __restrict__ ws) {
  typedef typename cc::acc_type<T>::type Acc;
  typedef cc::TileConfig<BM, BN, BK, TM, TN> Cfg;
  typedef cc::MainLoop<T, Cfg, MATH> Loop;
  __shared__ __align__(16) unsigned char smem[Loop::SMEM_BYTES];
  extern __shared__ __align__(16) unsigned char dsmem[];  // the tensor-core loops' stages
  const int z = blockIdx.z / splits, part = blockIdx.z % splits;
  const int zo = z / G2, zi = z % G2;
  int m0, n0;
  cc::block_tile<BM, BN>(m0, n0);
  int kb, ke;
  cc::split_range<BK>(K, splits, part, kb, ke);

  cc::DenseLoader<T, typename Loop::Reg, BM, BK, Cfg::THREADS, (bool)A_KCONTIG, Loop::LDA, Loop::ROW_K> la;
  la.base = A + zo * a_so + zi * a_si + m0 * a_rs;
  la.rs = a_rs; la.ks = a_ks; la.rows = M - m0; la.K = ke; la.vec = a_vec;
  // B is read as its transpose: rows are the N columns.
  cc::DenseLoader<T, typename Loop::Reg, BN, BK, Cfg::THREADS, (bool)B_KCONTIG, Loop::LDB, Loop::ROW_K> lb;
  lb.base = B + zo * b_so + zi * b_si + n0 * b_rs;
  lb.rs = b_rs; lb.ks = b_ks; lb.rows = N - n0; lb.K = ke; lb.vec = b_vec;

  Acc acc[TM][TN];
  Loop::run(la, lb, kb, ke, acc, smem, dsmem);
  const cc::OutMap map = {c_L, c_outer, c_inner, c_n};
  if (splits == 1) {
    const cc::index_t c_off = zo * c_so + zi * c_si;
    const cc::Epilogue<T> ep = {Z + c_off, has_z, act};
    cc::store_tile<Cfg>(acc, C + c_off, bias + zi * bias_si, has_bias, ep, m0, n0, M, N, map,
                        c_vec);
  } else {
    cc::store_partial<Cfg>(acc, ws, part, z, gridDim.z / splits, m0, n0, M, N, c_n == 1,
                          c_n == 1 ? N % 4 == 0 : M % 4 == 0);
  }
}
