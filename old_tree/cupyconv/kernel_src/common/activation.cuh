// The activations of the fused epilogues, in the accumulator type (float or double): the one
// definition every kernel that applies them calls.  Codes are the CC_ACT_* constants defined in
// front of every module (cupyconv/_core/kernels.py KERNEL_CONSTANTS; names in _core/activation.py).
//
// The code is a runtime argument, uniform per launch: its tests are uniform branches, and one
// binary serves every activation (a binary per activation would multiply the GEMM binaries).
// silu and gelu use the full-precision math functions (no fast intrinsics): a float32 result
// stays within a few ulp of the float64 reference.
#pragma once
#include "common.cuh"

#if !defined(CC_ACT_NONE) || !defined(CC_ACT_RELU) || !defined(CC_ACT_RELU6) || \
    !defined(CC_ACT_SILU) || !defined(CC_ACT_GELU) || !defined(CC_ACT_GELU_TANH)
#error "activation codes CC_ACT_* must be defined (cupyconv/_core/kernels.py KERNEL_CONSTANTS)"
#endif

namespace cc {

// Overloads per accumulator type: the float ones keep float32 math in float32.
__device__ __forceinline__ float act_exp(float v) { return expf(v); }
__device__ __forceinline__ double act_exp(double v) { return exp(v); }
__device__ __forceinline__ float act_erf(float v) { return erff(v); }
__device__ __forceinline__ double act_erf(double v) { return erf(v); }

// The smooth activations, out of line: the GEMM epilogue applies the activation to every
// accumulator of a thread's tile (64 of them), and inlined there, exp, erf and the division made
// the float32 implicit-GEMM kernel twice the size, 2.5x slower to compile and spill 1.2 KB per
// thread (sm_90, 128-register cap); one out-of-line body costs a call per value and spills 24 B.
// silu and the tanh form of gelu share one sigmoid: 0.5 * (1 + tanh(u)) = 1 / (1 + exp(-2u)), so
// gelu_tanh(v) = v * sigmoid(2u), u = sqrt(2 / pi) * (v + 0.044715 v^3).  exp(-u) = inf for very
// negative u gives -0, as PyTorch's forms do.
template <typename A>
__device__ __noinline__ A activate_smooth(A v, int act) {
  if (act == CC_ACT_GELU)  // v * Phi(v), Phi the standard normal CDF
    return A(0.5) * v * (A(1) + act_erf(v * A(0.70710678118654752440)));
  const A u = act == CC_ACT_SILU ? v : A(1.59576912160573071176) * (v + A(0.044715) * v * v * v);
  return v / (A(1) + act_exp(-u));
}

// `act` applied to v: relu and relu6 inline (clamps that let NaN through, as in PyTorch), the
// others through activate_smooth.
template <typename A>
__device__ __forceinline__ A activate(A v, int act) {
  if (act == CC_ACT_NONE) return v;
  if (act == CC_ACT_RELU) return v < A(0) ? A(0) : v;
  if (act == CC_ACT_RELU6) return v < A(0) ? A(0) : (v > A(6) ? A(6) : v);
  return activate_smooth(v, act);
}

// What the fused epilogues add after the bias: the residual z (read at the output's own element
// offset: z has the output's layout) and the activation.  `has_z` false and `act` CC_ACT_NONE
// return v unchanged, bit for bit.  `z` may point into the output's buffer only where it is the
// output's placeholder (has_z false); it is never read then.
template <typename T>
struct Epilogue {
  const T* z;
  int has_z;
  int act;

  template <typename A>
  __device__ __forceinline__ A operator()(A v, index_t offset) const {
    if (has_z) v += load_as<A>(z[offset]);
    return activate(v, act);
  }
};

}  // namespace cc
