"""Complex convolution: Gauss's three real products (what ``cupyconv.conv`` runs) against four
real products and against one real convolution of stacked parts (x as [re, im] channels, w as
the 2x2 block [[re, -im], [im, re]]: the native complex accumulation's arithmetic in one
launch), forward, complex64 and complex128, on a deep-learning layer and on image-sized
single-channel filtering (sigpy's MRI use).  PyTorch's complex conv2d for scale where it runs.

    python3 benchmarks/exp_complex.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import measure  # noqa: E402
from measure import time_gpu  # noqa: E402

# (name, x shape NCHW, w shape, padding)
PROBLEMS = (("dl 32x64x56^2 3x3", (32, 64, 56, 56), (64, 64, 3, 3), 1),
            ("dl 32x256x14^2 3x3", (32, 256, 14, 14), (256, 256, 3, 3), 1),
            ("mri 8x1x256^2 7x7", (8, 1, 256, 256), (1, 1, 7, 7), 3),
            ("mri 1x8x320^2 5x5 coils", (1, 8, 320, 320), (8, 8, 5, 5), 2))


def four_products(x, w, padding):
    xr, xi, wr, wi = x.real, x.imag, w.real, w.imag
    rr = cupyconv.conv(xr, wr, padding=padding)
    ii = cupyconv.conv(xi, wi, padding=padding)
    ri = cupyconv.conv(xr, wi, padding=padding)
    ir = cupyconv.conv(xi, wr, padding=padding)
    out = cupy.empty(rr.shape, x.dtype)
    cupy.subtract(rr, ii, out=out.real)
    cupy.add(ri, ir, out=out.imag)
    return out


def stacked(x, w, padding):
    c, k = x.shape[1], w.shape[0]
    x2 = cupy.concatenate([x.real, x.imag], axis=1)
    w2 = cupy.empty((2 * k, 2 * c) + w.shape[2:], x2.dtype)
    w2[:k, :c], w2[:k, c:], w2[k:, :c], w2[k:, c:] = w.real, -w.imag, w.imag, w.real
    y2 = cupyconv.conv(x2, w2, padding=padding)
    out = cupy.empty((y2.shape[0], k) + y2.shape[2:], x.dtype)
    out.real[...] = y2[:, :k]
    out.imag[...] = y2[:, k:]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    torch = measure.load_torch(quiet=True)
    rng = cupy.random.default_rng(0)
    for name, xs, ws, pad in PROBLEMS:
        for dtype in ("complex64", "complex128"):
            real = "float32" if dtype == "complex64" else "float64"
            x = (rng.standard_normal(xs, dtype=real) + 1j * rng.standard_normal(xs, dtype=real)).astype(dtype)
            w = (rng.standard_normal(ws, dtype=real) + 1j * rng.standard_normal(ws, dtype=real)).astype(dtype)
            calls = {"gauss3": lambda: cupyconv.conv(x, w, padding=pad),
                     "four": lambda: four_products(x, w, pad),
                     "stacked": lambda: stacked(x, w, pad)}
            ref = calls["gauss3"]()
            scale = float(cupy.abs(ref).max())
            line = []
            for label, fn in calls.items():
                err = float(cupy.abs(fn() - ref).max()) / scale
                line.append(f"{label} {time_gpu(fn, repeat=args.repeat):.4f} ms (diff {err:.1e})")
            if torch is not None:
                xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
                try:
                    t = time_gpu(lambda: torch.nn.functional.conv2d(xt, wt, padding=pad),
                                 repeat=args.repeat)
                    line.append(f"torch {t:.4f} ms")
                except RuntimeError as e:
                    line.append(f"torch: {str(e).splitlines()[0][:60]}")
            print(f"{name:26s} {dtype:10s} " + " | ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
