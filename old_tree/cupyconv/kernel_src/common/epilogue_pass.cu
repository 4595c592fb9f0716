// The fused epilogue's residual and activation as one pass of their own, for the kernels that do
// not apply them in their own stores (the depthwise kernels): y = act(y + z) in place, in the
// accumulator type, y and z C-contiguous arrays of one shape.  The bias is added by the kernel that
// wrote y.  One thread per element, grid-stride.
#include "common.cuh"
#include "activation.cuh"

template <typename T>
__global__ void epilogue_pass(T* __restrict__ y, const T* __restrict__ z, int has_z, int act,
                              cc::index_t total) {
  typedef typename cc::acc_type<T>::type A;
  const cc::Epilogue<T> ep = {z, has_z, act};
  for (cc::index_t i = (cc::index_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (cc::index_t)blockDim.x * gridDim.x) {
    y[i] = cc::store_as<T>(ep(cc::load_as<A>(y[i]), i));
  }
}
