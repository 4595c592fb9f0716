// Second stage of split-K (see splitk.cuh): out = act(sum over parts (in order) + bias + Z),
// placed through the same two-level batch strides and row map as the GEMM epilogue; the residual
// Z has the output's layout and is read at the output element's offset.  One thread per element,
// in workspace order, which is the output's contiguous order.
#include "common.cuh"
#include "activation.cuh"

template <typename T>
__global__ void splitk_reduce(const typename cc::acc_type<T>::type* __restrict__ ws,
                              T* __restrict__ C, const T* __restrict__ bias,
                              const T* __restrict__ Z, int has_bias, int has_z, int act,
                              int splits, int batch, int M, int N, int n_fast, int G2,
                              cc::index_t c_so, cc::index_t c_si, cc::index_t bias_si,
                              cc::index_t L, cc::index_t outer, cc::index_t inner, cc::index_t col) {
  typedef typename cc::acc_type<T>::type A;
  const cc::Epilogue<T> ep = {Z, has_z, act};
  const cc::index_t mn = (cc::index_t)M * N, total = batch * mn;
  const bool narrow = total <= 0xffffffffLL;
  for (cc::index_t idx = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (cc::index_t)blockDim.x * gridDim.x) {
    A v = A(0);
    for (int s = 0; s < splits; ++s) v += ws[s * total + idx];
    cc::index_t r = idx;
    int m, n;
    if (n_fast) { n = cc::divmod(r, N, narrow); m = cc::divmod(r, M, narrow); }
    else { m = cc::divmod(r, M, narrow); n = cc::divmod(r, N, narrow); }
    const int entry = (int)r, zo = entry / G2, zi = entry % G2;  // batch entry
    if (has_bias) v += cc::load_as<A>(bias[zi * bias_si + n]);
    const cc::index_t off = zo * c_so + zi * c_si + (m / L) * outer + (m % L) * inner + n * col;
    C[off] = cc::store_as<T>(ep(v, off));
  }
}
