"""Issue 46 (TF32 on the TMA kernel): what a TMA copy with the tensor map's data type
TFLOAT32 (or TFLOAT32_FTZ) does to float32 elements on their way into shared memory.  wgmma's
TF32 products read only the top 19 bits of each operand; cuBLAS's TF32 results have the error
of operands rounded to nearest (benchmarks/notes/gemm.md, "Session 11": truncated operands gave
2.6x its error), so the TMA kernel needs rounded operands.  If the copy engine rounds, the
kernel needs no rounding pass of its own; if it truncates or copies the bits, a rounding pass
(or a rounded copy of the operands) stays.

A 32 x 32 box of hand-made float32 bit patterns (random mantissas, exact ties of the 13 dropped
bits with the kept last bit even and odd, negatives, subnormals, infinities, NaN) goes through
one 2-D TMA copy per data type (FLOAT32, TFLOAT32, TFLOAT32_FTZ) into shared memory and back
out; each result is compared bit for bit with the input, truncation (round toward zero),
round-to-nearest-even and round-to-nearest-away (``cvt.rna.tf32.f32``), subnormals flushed or
not.  Prints one line per data type: which of them it matches, and the first mismatches.

    python3 benchmarks/experiments/exp_tma_tf32.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# One block: thread 0 starts the copy of the whole 32 x 32 box (4096 bytes, no swizzle) and
# every thread waits on the barrier, then copies shared memory out.  Self-contained PTX (the
# kernel sources' tma.cuh wraps the same instructions for the GEMM).
SOURCE = r"""
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

extern "C" __global__ void tma_copy_box(const __grid_constant__ TensorMap map,
                                        unsigned* __restrict__ out) {
  __shared__ __align__(128) unsigned box[32 * 32];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned bar_s = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_s));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(bar_s), "r"(4096u) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        ::"r"((unsigned)__cvta_generic_to_shared(box)), "l"(&map), "r"(0), "r"(0), "r"(bar_s)
        : "memory");
  }
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done) : "r"(bar_s), "r"(0u) : "memory");
  }
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) out[i] = box[i];
}
"""

DROPPED = 13                  # float32 mantissa bits a TF32 operand does not keep
LOW = (1 << DROPPED) - 1


def patterns() -> np.ndarray:
    """1024 float32 bit patterns: ties of the dropped bits with the kept last bit even and odd,
    just below and above them, random normals of both signs, subnormals, infinities, NaN."""
    rng = np.random.default_rng(46)
    kept = rng.integers(0, 1 << 19, 200, dtype=np.uint32) << DROPPED  # sign, exponent, 10 bits
    kept = (kept & ~np.uint32(0x7F800000)) | np.uint32(0x3F800000)   # exponents of 1.0
    half = np.uint32(1 << (DROPPED - 1))
    special = np.concatenate([
        kept | half, kept | (half - 1), kept | (half + 1),                 # ties, either side
        (kept ^ np.uint32(1 << DROPPED)) | half,                           # ties, other parity
        np.uint32(0x80000000) | kept[:24] | half,                          # negative ties
    ]).astype(np.uint32)
    rest = 1024 - special.size - 8
    randoms = rng.integers(0, 1 << 32, rest, dtype=np.uint64).astype(np.uint32)
    exponent = (randoms >> 23) & 0xFF
    randoms = np.where((exponent == 0) | (exponent == 0xFF), randoms ^ np.uint32(0x40000000),
                       randoms)  # (normals only here: the specials come next)
    extras = np.array([0x00000001, 0x00001FFF, 0x007FFFFF, 0x80400000,   # subnormals
                       0x7F800000, 0xFF800000, 0x7FC00001, 0x7F7FFFFF],  # inf, -inf, NaN, max
                      dtype=np.uint32)
    return np.concatenate([special, randoms, extras]).astype(np.uint32)


def rounded(bits: np.ndarray, mode: str, ftz: bool) -> np.ndarray:
    """The TF32 operand of each pattern (as float32 bits): ``mode`` "rz" (truncate), "rne" or
    "rna" (nearest, ties to even / away); ``ftz`` flushes subnormals to zero (sign kept).
    Infinities and NaN as they are (a NaN is only checked to stay a NaN: :func:`same`)."""
    bits = bits.astype(np.uint64)
    sign = bits & 0x80000000
    exponent = (bits >> 23) & 0xFF
    low = bits & LOW
    out = bits & ~np.uint64(LOW)
    if mode != "rz":
        up = low > (1 << (DROPPED - 1))
        tie = low == (1 << (DROPPED - 1))
        if mode == "rne":
            up |= tie & (((bits >> DROPPED) & 1) == 1)
        else:
            up |= tie
        finite = exponent != 0xFF
        out = np.where(up & finite, out + (1 << DROPPED), out)  # (carries into the exponent)
    out = np.where(exponent == 0xFF, bits, out)  # (infinities: exact; NaN: compared as NaN)
    if ftz:
        out = np.where(exponent == 0, sign, out)
    return out.astype(np.uint32)


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bitwise equal, but any NaN for a NaN (the copy engine may quiet or rewrite payloads)."""
    nan = lambda b: ((b >> 23) & 0xFF == 0xFF) & (b & 0x7FFFFF != 0)  # noqa: E731
    return bool(np.array_equal(nan(got), nan(want)) and np.array_equal(got[~nan(want)],
                                                                        want[~nan(want)]))


def main() -> int:
    import cupy

    from cupyconv._gemm import tma

    drv = tma._driver()
    bits = patterns()
    src = cupy.asarray(bits.reshape(32, 32))
    out = cupy.empty(32 * 32, dtype=cupy.uint32)
    fn = cupy.RawModule(code=SOURCE, options=("-arch=sm_90a", "-std=c++17")).get_function(
        "tma_copy_box")
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    kinds = drv.CUtensorMapDataType
    print(f"GPU {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; "
          f"{bits.size} float32 patterns through one 2-D TMA copy per data type")
    for name in ("FLOAT32", "TFLOAT32", "TFLOAT32_FTZ"):
        record = tma._encode(
            drv, "cuTensorMapEncodeTiled",
            (getattr(kinds, f"CU_TENSOR_MAP_DATA_TYPE_{name}"), 2, int(src.data.ptr),
             [u64(32), u64(32)], [u64(128)], [u32(32), u32(32)], [u32(1), u32(1)]),
            False, f"{name} 32 x 32")
        out.fill(0xDEADBEEF)
        fn((1,), (128,), (record, out))
        got = out.get()
        matches = [label for label, want in (
            ("unchanged", bits), ("truncated", rounded(bits, "rz", False)),
            ("truncated, ftz", rounded(bits, "rz", True)),
            ("nearest-even", rounded(bits, "rne", False)),
            ("nearest-even, ftz", rounded(bits, "rne", True)),
            ("nearest-away", rounded(bits, "rna", False)),
            ("nearest-away, ftz", rounded(bits, "rna", True)))
            if same(got, want)]
        print(f"  {name:13s} {', '.join(matches) if matches else 'none of the candidates'}")
        if not matches:
            for i in np.flatnonzero(got != rounded(bits, "rne", False))[:6]:
                print(f"    in {bits[i]:08x} -> {got[i]:08x} (rz {rounded(bits[i:i + 1], 'rz', False)[0]:08x}"
                      f", rne {rounded(bits[i:i + 1], 'rne', False)[0]:08x}, "
                      f"rna {rounded(bits[i:i + 1], 'rna', False)[0]:08x})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
