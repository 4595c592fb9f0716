"""Probe of the Hopper TMA GEMM (issue 46, first step): is it correct, and how far from cuBLAS?

    PYTHONPATH=. timeout 900 python3 benchmarks/experiments/exp_gemm_tma.py [--quick]
        [--dtypes float16,bfloat16] [--tiles 0,1] [--no-timing]

Needs an NVIDIA GPU of compute capability 9.0 and cuda-bindings (the cuda13 extra).

(a) Correctness: for each dtype, B orientation ("kn": B row-major [K, N], MN-major for wgmma;
    "nk": B the transpose of a row-major [N, K], K-major), tile and shape (edges in M, N and K
    included), the result (written into a NaN-poisoned output) against the float32 cupy.matmul
    of the same inputs, and against float64 for the small shapes.  Bound: cupyconv's half
    tolerance (2x the rounding of the exact product to the storage type, verify.tolerance).
(b) Speed at 4096^3 and 8192^3: median of 20 CUDA-event timings after 5 warm-ups (the prepared
    launch alone: the tensor maps are encoded once), beside cupyconv.gemm of the same operands
    (the public call, its own tile) and cupy.matmul (cuBLAS) in the same dtype, as TFLOP/s and
    the ratio.

With ``--dtypes float32``: TF32 products (kernels.TMA_TF32_TILES, B K-major only), bound 2x the
error of the float64 product of TF32-rounded operands (verify.tf32_tolerance), beside
cupyconv.gemm(precision="tf32") and PyTorch's TF32 matmul (cuBLAS).

Exits 1 on any correctness failure (after printing every case), 2 if the kernel cannot run.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's cupyconv

SHAPES = [(4096, 4096, 4096), (1000, 1000, 1000), (129, 257, 264), (8192, 8192, 8192),
          (129, 264, 264), (1, 8, 8), (300, 1032, 72)]
SMALL = 2 * 10**9  # m * n * k up to which the float64 reference is computed too
TIMED = [(4096, 4096, 4096), (8192, 8192, 8192)]


def operands(m, n, k, dtype, b_kmajor, seed):
    import cupy

    from cupyconv._core.verify import random_array

    rng = np.random.default_rng(seed)
    a = cupy.asarray(random_array(rng, (m, k), dtype))
    if b_kmajor:
        b = cupy.asarray(random_array(rng, (n, k), dtype)).T
    else:
        b = cupy.asarray(random_array(rng, (k, n), dtype))
    return a, b


def check(dtype, b_kmajor, tile, shape, seed) -> bool:
    import cupy

    from cupyconv._core.verify import rel_error, tolerance
    from cupyconv._gemm.tma import gemm_tma

    m, n, k = shape
    if not b_kmajor and n % 8:
        print(f"  skip {dtype} kn {m}x{n}x{k}: row-major B needs N % 8 == 0 (16-byte rows)")
        return True
    a, b = operands(m, n, k, dtype, b_kmajor, seed)
    out = cupy.empty((m, n), dtype=a.dtype)
    out.fill(np.nan)
    gemm_tma(a, b, out, tile=tile)
    cupy.cuda.Device().synchronize()
    got = out.astype(cupy.float64)
    refs = {"f32": (a.astype(cupy.float32) @ b.astype(cupy.float32)).astype(cupy.float64)}
    if m * n * k <= SMALL:
        refs["f64"] = a.astype(cupy.float64) @ b.astype(cupy.float64)
    ok = True
    parts = []
    rounded = None
    if dtype == "float32":  # TF32: against what TF32-rounded operands allow
        from cupyconv._core.verify import round_tf32, tf32_tolerance

        ar, br = (cupy.asarray(round_tf32(x)).astype(cupy.float64) for x in (a, b))
        rounded = ar @ br
        refs.pop("f32")
        refs["f64"] = a.astype(cupy.float64) @ b.astype(cupy.float64)
    for name, ref in refs.items():
        err = rel_error(got, ref)
        bound = tolerance(dtype, ref) if rounded is None else tf32_tolerance(ref, rounded)
        nan = int(cupy.isnan(got).sum())
        maxabs = float(cupy.nanmax(cupy.abs(got - ref)))
        good = err <= bound and nan == 0
        ok &= good
        parts.append(f"{name}: rel {err:.2e} (bound {bound:.2e}) max|d| {maxabs:.2e}"
                     + (f" NaN {nan}" if nan else ""))
    orient = "nk" if b_kmajor else "kn"
    print(f"  {'ok  ' if ok else 'FAIL'} {dtype:8s} B {orient} tile {tile[0]}x{tile[1]}x{tile[2]}"
          f"/{tile[3]} {m}x{n}x{k}: " + "; ".join(parts), flush=True)
    return ok


def median_ms(fn, warmup=5, repeat=20) -> float:
    import cupy

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return float(np.median(times))


def timing(dtype, b_kmajor, tile, shape):
    import cupy

    import cupyconv
    from cupyconv._gemm.tma import prepare_gemm_tma

    m, n, k = shape
    a, b = operands(m, n, k, dtype, b_kmajor, 0)
    launch, _ = prepare_gemm_tma(a, b, tile=tile)
    ours = median_ms(launch)
    tf32 = dtype == "float32"
    routed = median_ms(lambda: cupyconv.gemm(a, b, precision="tf32" if tf32 else None))
    flops = 2.0 * m * n * k
    try:
        if tf32:  # (cuBLAS's TF32 through PyTorch: cupy.matmul's needs CUPY_TF32 at import)
            import torch

            torch.backends.cuda.matmul.allow_tf32 = True
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            theirs = median_ms(lambda: torch.matmul(ta, tb))
        else:
            theirs = median_ms(lambda: cupy.matmul(a, b))
        peer = f"cuBLAS {theirs:.3f} ms {flops / theirs / 1e9:.0f} TFLOP/s  ratio {theirs / ours:.2f}x"
    except Exception as exc:  # (cupy.matmul may not take bfloat16)
        peer = f"cuBLAS n/a ({type(exc).__name__}: {exc})"
    orient = "nk" if b_kmajor else "kn"
    print(f"  {dtype:8s} B {orient} tile {tile[0]}x{tile[1]} {m}x{n}x{k}: ours {ours:.3f} ms "
          f"{flops / ours / 1e9:.0f} TFLOP/s | cupyconv.gemm {routed:.3f} ms | {peer}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--tiles", default="0,1",
                   help="indices into kernels.TMA_TILES (TMA_TF32_TILES for float32)")
    p.add_argument("--quick", action="store_true", help="skip the 8192^3 correctness case")
    p.add_argument("--no-timing", action="store_true")
    args = p.parse_args(argv)

    import cupy

    from cupyconv._core.kernels import TMA_TF32_TILES, TMA_TILES

    dev = cupy.cuda.Device()
    name = cupy.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()
    print(f"device {dev.id}: {name}, compute capability {dev.compute_capability}, "
          f"cupy {cupy.__version__}")
    if dev.compute_capability != "90":
        print("the TMA GEMM needs compute capability 9.0")
        return 2
    dtypes = [d for d in args.dtypes.split(",") if d]
    tile_ids = [int(i) for i in args.tiles.split(",") if i]

    def tiles_of(dtype):
        return [(TMA_TF32_TILES if dtype == "float32" else TMA_TILES)[i] for i in tile_ids]

    def orientations(dtype):
        return (1,) if dtype == "float32" else (0, 1)  # (TF32: B K-major only)

    shapes = [s for s in SHAPES if not (args.quick and s[0] == 8192)]

    print("(a) correctness")
    failures = 0
    start = time.perf_counter()
    for dtype in dtypes:
        for tile in tiles_of(dtype):
            for b_kmajor in orientations(dtype):
                for i, shape in enumerate(shapes):
                    try:
                        ok = check(dtype, b_kmajor, tile, shape, seed=i)
                    except Exception as exc:
                        print(f"  FAIL {dtype} B {'nk' if b_kmajor else 'kn'} tile {tile} "
                              f"{shape}: {type(exc).__name__}: {exc}", flush=True)
                        ok = False
                    failures += not ok
    print(f"  {failures} failure(s), {time.perf_counter() - start:.1f} s")
    if not args.no_timing:
        print("(b) speed (median of 20 after 5 warm-ups)")
        for shape in TIMED:
            for dtype in dtypes:
                for tile in tiles_of(dtype):
                    for b_kmajor in orientations(dtype):
                        try:
                            timing(dtype, b_kmajor, tile, shape)
                        except Exception as exc:
                            print(f"  timing failed: {type(exc).__name__}: {exc}", flush=True)
    if failures:
        print(f"CORRECTNESS FAILED: {failures} case(s)")
        return 1
    print("all correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
