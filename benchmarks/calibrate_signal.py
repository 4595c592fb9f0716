"""Calibrate the signal API's cost model (cupyconv/_dispatch/signal.py) on the GPU.

    python3 benchmarks/calibrate_signal.py [--repeat 10] [--quick] [--only-3d]

Times ``correlate(..., method="direct")`` and ``method="fft"`` on a grid of problems (images
512^2-4096^2 with square kernels 3-63, 1-d signals, batched stacks, 3-d volumes; float32, plus
a smaller grid per other dtype), fits the model's constants by least squares on the model's own features, and
prints them ready to paste into cupyconv/_dispatch/signal.py, with the worst ratio of the auto choice to the
faster method over the grid before and after the fit.  Writes the raw timings as JSON under
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cupyconv._dispatch import signal as cost
from cupyconv import signal as cs  # noqa: E402
from cupyconv._signal.fft import fft_points, fft_work_dtype  # noqa: E402
from cupyconv._signal.direct import direct_runner  # noqa: E402
from cupyconv._signal.plan import compute_dtype, plan_filter  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402
from bench import git_commit  # noqa: E402


# 3-d volumes for the 3-d factors (none of bench_signal's held-out shapes); 'same' mode runs
# them on nd_dense_tile where the taps fit (DENSE_VOLUME_FACTOR)
GRID_3D = tuple(("float32", v, k, None) for v in ((64, 64, 64), (128, 128, 128), (192, 160, 64),
                                                  (224, 96, 48), (72, 136, 200))
                for k in ((3, 3, 3), (5, 5, 5), (7, 7, 7), (11, 11, 11), (3, 3, 13), (13, 5, 1)))


def grid(quick: bool):
    sizes = (512, 2048, 4096) if quick else (512, 1024, 2048, 4096)
    kernels = (3, 7, 15, 31, 63) if quick else (3, 5, 7, 11, 15, 21, 31, 45, 63)
    for n in sizes:
        for k in kernels:
            yield "float32", (n, n), (k, k), None
    for n, k in ((1 << 20, 15), (1 << 20, 127), (1 << 22, 31), (1 << 16, 1023)):
        yield "float32", (n,), (k,), None
    for b, n, k in ((64, 512, 5), (16, 256, 15), (256, 64, 3)):
        yield "float32", (b, n, n), (1, k, k), (1, 2)
    for dtype in ("float64", "complex64", "complex128"):
        for n, k in ((1024, 3), (1024, 9), (2048, 15), (1024, 31)):
            yield dtype, (n, n), (k, k), None


def features(plan, compute):
    """(direct units, bytes moved, fft units) exactly as the cost model computes them (the
    direct units without the 3-d factor)."""
    units = cost.filter_direct_units(plan, compute)
    moved = (math.prod(plan.shape_a) + plan.outputs()) * np.dtype(compute).itemsize
    per, batch = fft_points(plan)
    return units, moved, cost.FFT_TRANSFORMS * batch * per * math.log2(max(per, 2))


def measure(repeat: int, problems):
    import cupy

    rows = []
    for dtype, s1, s2, axes in problems:
        rng = cupy.random.default_rng(0)
        a = rng.uniform(-1, 1, s1).astype(dtype)
        k = rng.uniform(-1, 1, s2).astype(dtype)
        plan = plan_filter(s1, s2, dtype, dtype, func="correlate", mode="same", axes=axes)
        compute = compute_dtype(plan.result_dtype)
        t = {m: time_gpu(lambda m=m: cs.correlate(a, k, "same", m, axes=axes), repeat=repeat)
             for m in ("direct", "fft")}
        units, moved, fft_units = features(plan, compute)
        row = dict(dtype=dtype, in1=s1, in2=s2, axes=axes, compute=compute, ndim=len(plan.axes),
                   fft_dtype=fft_work_dtype(plan), direct_ms=t["direct"], fft_ms=t["fft"],
                   units=units, moved=moved, fft_units=fft_units)
        if len(plan.axes) == 3:  # both volume kernels, each on its own
            fill = np.zeros((), plan.result_dtype)[()]
            for name, dense in (("filter_direct", False), ("dense", True)):
                if dense and cost.dense_volume_units(plan, compute) is None:
                    continue
                run = (cost.dense_volume_runner(plan, compute) if dense
                       else direct_runner(plan, a, k, fill, compute))
                row[name + "_ms"] = time_gpu(lambda run=run: run(a, k), repeat=repeat)
            dense = cost.dense_volume_units(plan, compute)
            if dense is not None:
                row["dense_units"], row["dense_moved"] = dense
        rows.append(row)
        extra = "".join(f"  {n} {row[n + '_ms']:8.3f} ms" for n in ("filter_direct", "dense")
                        if n + "_ms" in row)
        print(f"{dtype:10s} {str(s1):20s} {str(s2):12s} direct {t['direct']:8.3f} ms  "
              f"fft {t['fft']:8.3f} ms{extra}", flush=True)
    return rows


def fit(rows):
    """The direct model by least squares (a fixed cost shared across dtypes, per-dtype slopes),
    the FFT model by :func:`fit_fft`."""
    out = {}
    f32 = [r for r in rows if r["dtype"] == "float32"]
    # direct: ms - moved / BW = F + c * units (float32 sets F; other dtypes their slope)
    A = np.array([[1.0, r["units"] / 1e9] for r in f32])
    y = np.array([r["direct_ms"] - r["moved"] / cost.BANDWIDTH_BYTES_PER_MS for r in f32])
    (F, c), *_ = np.linalg.lstsq(A, y, rcond=None)
    out["DIRECT_FIXED_MS"] = max(float(F), 0.0)
    out["DIRECT_MS_PER_GTAP"] = {"float32": float(c)}
    for dt in ("float64", "complex64", "complex128"):
        rs = [r for r in rows if r["compute"] == dt]
        if rs:
            num = sum((r["direct_ms"] - out["DIRECT_FIXED_MS"] - r["moved"] /
                       cost.BANDWIDTH_BYTES_PER_MS) * r["units"] for r in rs)
            out["DIRECT_MS_PER_GTAP"][dt] = float(num / sum(r["units"] ** 2 for r in rs) * 1e9)
    out.update(fit_fft(rows))
    return out


def fit_fft(rows) -> dict:
    """FFT_HOST_MS: the median FFT time of the problems with little transform work (< 0.05
    Gunits: host-bound); per dtype, the slope through the origin over the problems slower than
    1.5x that (device-bound), the current slope where none is."""
    host = float(np.median([r["fft_ms"] for r in rows if r["fft_units"] < 0.05e9]))
    slopes = dict(cost.FFT_MS_PER_GUNIT)
    for dt in slopes:
        rs = [r for r in rows if r["fft_dtype"] == dt and r["fft_ms"] > 1.5 * host]
        if rs:
            slopes[dt] = float(sum(r["fft_ms"] * r["fft_units"] for r in rs)
                               / sum(r["fft_units"] ** 2 for r in rs) * 1e9)
    return {"FFT_HOST_MS": host, "FFT_MS_PER_GUNIT": slopes}


def fit_3d(rows, consts, name: str) -> float | None:
    """The least-squares 3-d scale ``name`` of the direct slope (DIRECT_3D_FACTOR from the
    filter_direct timings, DENSE_VOLUME_FACTOR from the nd_dense_tile ones, over its padded
    tiles), the other constants as given; None where no row has the timing."""
    key, units, extra = {"DIRECT_3D_FACTOR": ("filter_direct_ms", "units", None),
                         "DENSE_VOLUME_FACTOR": ("dense_ms", "dense_units", "dense_moved")}[name]
    rs = [r for r in rows if key in r]
    if not rs:
        return None
    base = [r[units] * consts["DIRECT_MS_PER_GTAP"][r["compute"]] / 1e9 for r in rs]
    rest = [r[key] - consts["DIRECT_FIXED_MS"] - (r["moved"] + (r[extra] if extra else 0))
            / cost.BANDWIDTH_BYTES_PER_MS for r in rs]
    return float(sum(b * y for b, y in zip(base, rest)) / sum(b * b for b in base))


def worst_choice(rows, consts) -> float:
    """Largest (time of the method the model picks) / (faster measured time) over the grid; on
    volumes timed kernel by kernel, the direct estimate is the cheaper kernel's."""
    worst = 1.0
    for r in rows:
        slope = consts["DIRECT_MS_PER_GTAP"].get(r["compute"],
                                                 cost.DIRECT_MS_PER_GTAP[r["compute"]])
        bw = cost.BANDWIDTH_BYTES_PER_MS
        factor = consts["DIRECT_3D_FACTOR"] if r.get("ndim") == 3 else 1.0
        d = consts["DIRECT_FIXED_MS"] + factor * r["units"] * slope / 1e9 + r["moved"] / bw
        direct = r.get("filter_direct_ms", r["direct_ms"])
        if "dense_ms" in r:
            dd = (consts["DIRECT_FIXED_MS"] + consts["DENSE_VOLUME_FACTOR"] * r["dense_units"]
                  * slope / 1e9 + (r["moved"] + r["dense_moved"]) / bw)
            if dd < d:
                d, direct = dd, r["dense_ms"]
        f = max(consts["FFT_HOST_MS"], r["fft_units"] * consts["FFT_MS_PER_GUNIT"].get(
            r["fft_dtype"], cost.FFT_MS_PER_GUNIT[r["fft_dtype"]]) / 1e9)
        picked = r["fft_ms"] if f < d else direct
        fastest = min(r["fft_ms"], r["direct_ms"], r.get("filter_direct_ms", np.inf),
                      r.get("dense_ms", np.inf))
        worst = max(worst, picked / fastest)
    return worst


def apply_factors(fitted: dict) -> None:
    """Rewrite the 3-d factors' assignments in the cost model's source with the fitted values
    (the other constants are pasted by hand: their fit spans every dtype)."""
    import re

    path = ROOT / "cupyconv" / "_dispatch" / "signal.py"
    text = path.read_text()
    for name in ("DIRECT_3D_FACTOR", "DENSE_VOLUME_FACTOR"):
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {fitted[name]:.3f}", text, flags=re.M)
        if n != 1:
            raise SystemExit(f"{name}: expected one assignment in {path}, found {n}")
    path.write_text(text)
    print(f"wrote the 3-d factors into {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="a smaller grid (about a minute)")
    ap.add_argument("--only-3d", action="store_true",
                    help="time the 3-d volumes only and fit their factors alone")
    ap.add_argument("--apply", action="store_true",
                    help="write the fitted 3-d factors into cupyconv/_dispatch/signal.py")
    args = ap.parse_args()
    current = dict(DIRECT_FIXED_MS=cost.DIRECT_FIXED_MS, DIRECT_MS_PER_GTAP=cost.DIRECT_MS_PER_GTAP,
                   FFT_HOST_MS=cost.FFT_HOST_MS, FFT_MS_PER_GUNIT=cost.FFT_MS_PER_GUNIT,
                   DIRECT_3D_FACTOR=cost.DIRECT_3D_FACTOR,
                   DENSE_VOLUME_FACTOR=cost.DENSE_VOLUME_FACTOR)
    rows = measure(args.repeat, GRID_3D if args.only_3d else tuple(grid(args.quick)) + GRID_3D)
    fitted = dict(current) if args.only_3d else fit(rows)
    for name in ("DIRECT_3D_FACTOR", "DENSE_VOLUME_FACTOR"):
        value = fit_3d(rows, fitted, name)
        fitted[name] = current[name] if value is None else value
    print(f"\nworst auto / fastest over the grid: current constants {worst_choice(rows, current):.2f}, "
          f"fitted {worst_choice(rows, fitted):.2f}\n\nfitted constants for cupyconv/_dispatch/signal.py:")
    for name, value in fitted.items():
        if isinstance(value, dict):
            value = {k: round(v, 4) for k, v in value.items()}
        else:
            value = round(value, 4)
        print(f"{name} = {value}")
    if args.apply:
        apply_factors(fitted)
    out = ROOT / "benchmarks" / "results" / f"signal-calibration-{git_commit()}.json"
    out.write_text(json.dumps({"rows": rows, "fitted": fitted}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
