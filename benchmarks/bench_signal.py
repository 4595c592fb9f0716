"""Signal-API benchmark (issue 6): image filtering against CuPy's own routines, in one run.

    python3 benchmarks/bench_signal.py [--repeat 20] [--only 4096]

Problems: the image-filtering rows of the public suite (float32 4096^2 with 3x3, 7x7, 15x15,
31x31; 1024^2 with 63x63), a batched stack (64 x 512^2, 5x5, one call through ``axes=``) and a
long 1-d signal; and problems held out of the cost model's fit (``HOLDOUT``: 3-d volumes,
non-square images and kernels).  Ours: the direct kernel, the FFT path and ``method="auto"``; peers:
``cupyx.scipy.signal.correlate2d``, ``cupyx.scipy.ndimage.correlate`` and
``cupyx.scipy.signal.fftconvolve`` (for the stack the 2-d peers run once per image, ndimage with a
(1, k, k) filter on the whole stack).  Every result is checked against the fastest peer's output.
Times: median device ms (CUDA events, back-to-back calls, after warm-up).  Ratios > 1: ours
faster.  JSON under benchmarks/results/signal-<device>-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
from cupyconv import signal as cs  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402
from bench import git_commit  # noqa: E402

# name: (in1 shape, in2 shape, correlated axes or None)
PROBLEMS = {
    "4096^2 3x3": ((4096, 4096), (3, 3), None),
    "4096^2 7x7": ((4096, 4096), (7, 7), None),
    "4096^2 15x15": ((4096, 4096), (15, 15), None),
    "4096^2 31x31": ((4096, 4096), (31, 31), None),
    "1024^2 63x63": ((1024, 1024), (63, 63), None),
    "64 x 512^2 5x5 (batched)": ((64, 512, 512), (1, 5, 5), (1, 2)),
    "1-d 2^22, 127 taps": ((1 << 22,), (127,), None),
}
# Held out from the cost model's fit (calibrate_signal.py fits square 2-d images, the stack and
# 1-d signals): 3-d volumes, non-square images and kernels, sizes that are not powers of two.
HOLDOUT = {
    "3000x1700 9x5": ((3000, 1700), (9, 5), None),
    "2048x600 21x3": ((2048, 600), (21, 3), None),
    "777x1234 45x45": ((777, 1234), (45, 45), None),
    "5000x300 3x61": ((5000, 300), (3, 61), None),
    "3-d 128x160x96 5x5x5": ((128, 160, 96), (5, 5, 5), None),
    "3-d 200x200x64 9x9x3": ((200, 200, 64), (9, 9, 3), None),
    "3-d 96^3 15x15x15": ((96, 96, 96), (15, 15, 15), None),
    "1-d 1000003, 1001 taps": ((1000003,), (1001,), None),
    # added with DIRECT_3D_FACTOR (fitted on other volumes): 3-d judged on new shapes too
    "3-d 160x120x80 7x7x7": ((160, 120, 80), (7, 7, 7), None),
    "3-d 256x256x48 3x3x9": ((256, 256, 48), (3, 3, 9), None),
    "3-d 100^3 9x9x9": ((100, 100, 100), (9, 9, 9), None),
}
OURS = ("direct", "fft", "auto")


def peers(a, k, axes):
    """name -> callable computing correlate(a, k, 'same') with CuPy's routines."""
    import cupy
    from cupyx.scipy import ndimage
    from cupyx.scipy import signal as xs

    conv_axes = axes if axes is not None else tuple(range(a.ndim))
    flipped = cupy.ascontiguousarray(cupy.flip(k, axis=conv_axes))  # correlate = convolve(flip)
    out = {}
    if axes is None and a.ndim == 2:
        out["cupyx correlate2d"] = lambda: xs.correlate2d(a, k, mode="same")
    elif axes is None:
        out["cupyx correlate"] = lambda: xs.correlate(a, k, mode="same")
    elif axes is not None:
        out["cupyx correlate2d (loop)"] = lambda: cupy.stack(
            [xs.correlate2d(img, k[0], mode="same") for img in a])
    # ndimage centres even kernels differently; the suite's kernels are odd, so 'same' agrees.
    out["cupyx ndimage.correlate"] = lambda: ndimage.correlate(a, k, mode="constant")
    out["cupyx fftconvolve"] = lambda: xs.fftconvolve(a, flipped, mode="same", axes=axes)
    return out


def run(repeat: int, only: str | None, sets=("suite", "holdout"), rounds: int = 3) -> dict:
    import cupy

    rows = []
    print(HEADER)
    problems = [(name, spec, False) for name, spec in PROBLEMS.items() if "suite" in sets]
    problems += [(name, spec, True) for name, spec in HOLDOUT.items() if "holdout" in sets]
    for name, (s1, s2, axes), holdout in problems:
        if only and only not in name:
            continue
        rng = cupy.random.default_rng(len(name))
        a = rng.uniform(-1, 1, s1, dtype=cupy.float32)
        k = rng.uniform(-1, 1, s2, dtype=cupy.float32)
        row = {"problem": name, "in1": s1, "in2": s2, "axes": axes, "holdout": holdout,
               "ms": {}, "err": {}}
        ref, fns = None, {}
        for peer, fn in peers(a, k, axes).items():
            try:
                ref = fn() if ref is None else ref
            except NotImplementedError:  # (cupyx.scipy.signal.correlate: 1-d only under auto)
                row.setdefault("unsupported", []).append(peer)
                continue
            fns[peer] = fn
        for method in OURS:
            def fn(method=method):
                return cs.correlate(a, k, mode="same", method=method, axes=axes)
            fns[method] = fn
            row["err"][method] = rel_error(fn(), ref)
        # Calls of ~0.1 ms are close to host-bound, and one median can catch a slow spell of
        # the host: every routine is timed in each of `rounds` rounds, its best median kept.
        for _ in range(rounds):
            for name, fn in fns.items():
                t = time_gpu(fn, repeat=repeat)
                row["ms"][name] = min(t, row["ms"].get(name, t))
        row["auto_picked"] = cs.choose_conv_method(a, k, mode="same", axes=axes)
        fastest = min(row["ms"].values())
        row["auto_vs_fastest"] = row["ms"]["auto"] / fastest
        rows.append(row)
        print(format_row(row), flush=True)
        print("   " + ", ".join(f"{m} {t:.3f} ms" for m, t in row["ms"].items()), flush=True)
    return {"rows": rows}


HEADER = ("| problem | direct ms | fft ms | auto ms | auto picked | auto / fastest | "
          "x cupyx correlate2d | x ndimage.correlate | x cupyx fftconvolve | err (direct, fft) |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def format_row(row) -> str:
    """One markdown row; "x peer" = peer ms / our direct ms (> 1: our kernel faster)."""
    ms = row["ms"]

    def ratio(prefix):
        name = next((p for p in ms if p.startswith(prefix)), None)
        return f"{ms[name] / ms['direct']:.2f}" if name else "—"

    return (f"| {row['problem']} | {ms['direct']:.3f} | {ms['fft']:.3f} | {ms['auto']:.3f} | "
            f"{row['auto_picked']} | {row['auto_vs_fastest']:.2f} | "
            f"{ratio('cupyx correlate')} | {ratio('cupyx ndimage')} | {ratio('cupyx fftconvolve')} | "
            f"{row['err']['direct']:.1e}, {row['err']['fft']:.1e} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default=None, help="run only problems whose name contains this")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds over all routines; each keeps its best median (3)")
    ap.add_argument("--sets", default="suite,holdout",
                    help="problem sets: suite (the fitted ones), holdout (not used in the fit)")
    args = ap.parse_args()
    import cupy

    dev = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    dev = dev.decode() if isinstance(dev, bytes) else str(dev)
    result = run(args.repeat, args.only, tuple(args.sets.split(",")), args.rounds)
    result.update(device=dev, commit=git_commit(), cupy=cupy.__version__,
                  cupyconv=cupyconv.__version__, python=platform.python_version(),
                  dtype="float32", mode="same",
                  note=f"ms = best of {args.rounds} rounds of a median device ms; ratios in the "
                       "table are peer_ms / our direct ms")
    out = ROOT / "benchmarks" / "results" / f"signal-{dev.replace(' ', '_')}-{result['commit']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    for label, held in (("fitted problems", False), ("held-out problems", True)):
        ratios = [r["auto_vs_fastest"] for r in result["rows"] if r["holdout"] == held]
        if ratios:
            print(f"auto on the {label}: at most {max(ratios):.2f}x the fastest of ours and "
                  f"cupyx's (target <= 1.25)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
