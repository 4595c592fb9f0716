"""Forward-convolution benchmark: every cupyconv method against cuDNN and im2col + cupy.matmul.

    python3 benchmarks/bench.py [--repeat 30] [--only res2] [--dtype float32]

Runs the forward problems of the public suite (DESIGN.md section 4), checks each result against
cuDNN (TF32 off), prints ms / TFLOP/s / ratios, and writes JSON (GPU, versions, commit) under
benchmarks/results/.  Peers run in the same process on the same inputs; every time is the median
of CUDA-event samples after warm-up, each sample over back-to-back calls so that device time, not
Python launch overhead, is measured (the host time per `auto` call is reported beside it).  Ratios
> 1 mean cupyconv is faster.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupyconv  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._dispatch.choose import choose  # noqa: E402
from cupyconv._dispatch.forward import FORWARD  # noqa: E402
from cupyconv._core.timing import host_overhead_us, time_gpu  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402

# name: (N, C, H, W, K, kernel, stride, pad, dilation, groups)
SUITE = {
    "resnet50 conv1 7x7 s2": (32, 3, 224, 224, 64, 7, 2, 3, 1, 1),
    "res2 3x3 64": (32, 64, 56, 56, 64, 3, 1, 1, 1, 1),
    "res2 1x1 64->256": (32, 64, 56, 56, 256, 1, 1, 0, 1, 1),
    "res3 3x3 128": (32, 128, 28, 28, 128, 3, 1, 1, 1, 1),
    "res4 3x3 256": (32, 256, 14, 14, 256, 3, 1, 1, 1, 1),
    "res5 3x3 512": (32, 512, 7, 7, 512, 3, 1, 1, 1, 1),
    "downsample 1x1 s2": (32, 256, 56, 56, 512, 1, 2, 0, 1, 1),
    "dilated 3x3 d2": (32, 128, 56, 56, 128, 3, 1, 2, 2, 1),
    "resnext 3x3 g32": (32, 256, 28, 28, 256, 3, 1, 1, 1, 32),
    "mbv2 dw 3x3 144": (32, 144, 56, 56, 144, 3, 1, 1, 1, 144),
    "mbv2 dw 3x3 960": (32, 960, 7, 7, 960, 3, 1, 1, 1, 960),
    "pointwise 144->24": (32, 144, 56, 56, 24, 1, 1, 0, 1, 1),
    "ck N128 3x3 s2": (128, 128, 71, 71, 256, 3, 2, 1, 1, 1),
}


def git_commit() -> str:
    """HEAD of the checkout, or $CUPYCONV_COMMIT where the tree was copied without .git."""
    import os

    if os.environ.get("CUPYCONV_COMMIT"):
        return os.environ["CUPYCONV_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def im2col_matmul(x, w, geom):
    """Explicit im2col (ours) + cupy.matmul, the baseline every GEMM path must beat."""
    import cupy

    col = cupyconv.im2col(x, geom.kernel, stride=geom.stride,
                          padding=tuple(zip(geom.pad_lo, geom.pad_hi)), dilation=geom.dilation)
    y = cupy.matmul(w.reshape(geom.out_channels, -1), col)
    return y.reshape(geom.output_shape)


def cold_compile_times() -> dict:
    """First-call latency of a conv in fresh processes: empty disk cache, then warm disk cache."""
    import os
    import tempfile

    code = ("import time, cupy, cupyconv; x = cupy.ones((2, 64, 28, 28), cupy.float32); "
            "w = cupy.ones((64, 64, 3, 3), cupy.float32); cupy.cuda.Device().synchronize(); "
            "t = time.perf_counter(); cupyconv.conv(x, w, padding=1, method='implicit_gemm'); "
            "cupy.cuda.Device().synchronize(); print(time.perf_counter() - t)")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, CUPY_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        for label in ("cold_compile_s", "warm_disk_cache_s"):
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True)
            out[label] = float(proc.stdout.strip()) if proc.returncode == 0 else None
    return out


def gemm_vs_cublas(sizes, repeat: int) -> list:
    """Our GEMM against cuBLAS SGEMM (cupy.matmul; CuPy leaves TF32 off unless asked)."""
    import cupy

    rows = []
    for size in sizes:
        rng = cupy.random.default_rng(size)
        a = rng.uniform(-1, 1, (size, size), dtype=cupy.float32)
        b = rng.uniform(-1, 1, (size, size), dtype=cupy.float32)
        err = rel_error(cupyconv.gemm(a, b), cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64)))
        ours = time_gpu(lambda: cupyconv.gemm(a, b), repeat=repeat)
        cublas = time_gpu(lambda: cupy.matmul(a, b), repeat=repeat)
        flop = 2 * size ** 3
        rows.append({"size": size, "ours_ms": ours, "cublas_ms": cublas, "ratio": cublas / ours,
                     "ours_tflops": flop / ours / 1e9, "cublas_tflops": flop / cublas / 1e9, "err": err})
        print(f"GEMM {size}^3 fp32: ours {ours:.3f} ms ({flop / ours / 1e9:.1f} TFLOP/s), cuBLAS "
              f"{cublas:.3f} ms ({flop / cublas / 1e9:.1f} TFLOP/s), ratio {cublas / ours:.3f}, "
              f"err {err:.1e}", flush=True)
    return rows


# Backward problems of issue 4: name -> (N, C, H, W, K, kernel, stride, pad)
BACKWARD = {
    "res3 3x3 128": (32, 128, 28, 28, 128, 3, 1, 1),
    "res2 3x3 64": (32, 64, 56, 56, 64, 3, 1, 1),
    "downsample 1x1 s2": (32, 256, 56, 56, 512, 1, 2, 0),
    "ck N128 3x3 s2": (128, 128, 71, 71, 256, 3, 2, 1),
}


def backward_vs_cudnn(repeat: int, torch) -> dict:
    """Our backward-data / backward-weight against cuDNN's (torch.nn.grad, TF32 off)."""
    import cupy

    rows, ratios = [], {"data": [], "weight": []}
    for name, (n, c, h, w, k, r, s, p) in BACKWARD.items():
        geom = ConvGeometry.from_shapes((n, c, h, w), (k, c, r, r), stride=s, padding=p)
        rng = cupy.random.default_rng(7)
        x = rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32)
        wt = rng.uniform(-1, 1, geom.weight_shape, dtype=cupy.float32)
        dy = rng.uniform(-1, 1, geom.output_shape, dtype=cupy.float32)
        ours = {"data": lambda: cupyconv.conv_backward_data(dy, wt, x.shape, stride=s, padding=p),
                "weight": lambda: cupyconv.conv_backward_weight(x, dy, wt.shape, stride=s, padding=p)}
        row = {"problem": name, "gflop": geom.flops / 1e9}
        for kind, fn in ours.items():
            row[f"{kind}_ms"] = time_gpu(fn, repeat=repeat)
        if torch is not None:
            torch.backends.cudnn.allow_tf32 = False
            xt, wtt, dyt = (torch.from_dlpack(a) for a in (x, wt, dy))
            peers = {"data": lambda: torch.nn.grad.conv2d_input(xt.shape, wtt, dyt, stride=s, padding=p),
                     "weight": lambda: torch.nn.grad.conv2d_weight(xt, wtt.shape, dyt, stride=s, padding=p)}
            for kind, fn in peers.items():
                ref = cupy.from_dlpack(fn())
                row[f"{kind}_err"] = rel_error(ours[kind](), ref)
                row[f"cudnn_{kind}_ms"] = time_gpu(fn, repeat=repeat)
                ratios[kind].append(row[f"cudnn_{kind}_ms"] / row[f"{kind}_ms"])
        rows.append(row)
        print(f"backward {name:20s} " + "  ".join(
            f"{kk} {v:.3f}" if kk.endswith("ms") else f"{kk} {v:.1e}" for kk, v in row.items()
            if kk.endswith(("_ms", "_err"))), flush=True)
    summary = {}
    for kind, vals in ratios.items():
        if vals:
            geo = math.exp(sum(map(math.log, vals)) / len(vals))
            summary[kind] = {"geomean_vs_cudnn_fp32": geo, "min_vs_cudnn_fp32": min(vals)}
            print(f"backward-{kind} vs cuDNN fp32: geomean {geo:.3f}x, min {min(vals):.3f}x")
    return {"rows": rows, "summary": summary}


RESNET = ("conv1", "res2 3x3", "res2 1x1", "res3", "res4", "res5", "downsample")


def summarize(rows) -> dict:
    """Issue-3 targets: auto vs cuDNN fp32 over the ResNet-50 layers, and vs im2col + matmul."""
    res = [r for r in rows if any(t in r["problem"] for t in RESNET) and "auto" in r["ms"]
           and "cudnn_fp32" in r["ms"]]
    if not res:
        return {}
    ratios = {r["problem"]: r["ms"]["cudnn_fp32"] / r["ms"]["auto"] for r in res}
    geo = math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios))
    vs_im2col = {r["problem"]: r["ms"]["im2col_matmul"] / r["ms"]["auto"] for r in rows
                 if "im2col_matmul" in r["ms"] and "auto" in r["ms"]}
    out = {"auto_vs_cudnn_fp32_geomean_resnet": geo, "auto_vs_cudnn_fp32_min_resnet": min(ratios.values()),
           "auto_vs_cudnn_fp32": ratios, "auto_vs_im2col_matmul": vs_im2col,
           "auto_slower_than_im2col_matmul": [k for k, v in vs_im2col.items() if v < 1]}
    print(f"\nauto vs cuDNN fp32 over ResNet-50 layers: geomean {geo:.3f}x, min "
          f"{min(ratios.values()):.3f}x; slower than im2col+matmul on: "
          f"{out['auto_slower_than_im2col_matmul'] or 'none'}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--only", default="", help="run problems whose name contains this")
    parser.add_argument("--methods", default=",".join(("auto",) + tuple(FORWARD)),
                        help="comma-separated methods")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--gemm", default="4096,8192", help="GEMM sizes vs cuBLAS ('' to skip)")
    parser.add_argument("--backward", action=argparse.BooleanOptionalAction, default=True,
                        help="run the backward problems")
    args = parser.parse_args(argv)

    import cupy

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = None
    dev = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    gpu = dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"]
    methods = [m for m in args.methods.split(",") if m]
    print(f"GPU {gpu}; cupy {cupy.__version__}; torch {torch.__version__ if torch else 'absent'}; "
          f"commit {git_commit()}", flush=True)
    gemm_rows = gemm_vs_cublas([int(v) for v in args.gemm.split(",") if v], args.repeat)
    rows = []
    problems = {k: v for k, v in SUITE.items() if args.only in k}
    for i, (name, (n, c, h, wd, k, r, s, p, d, g)) in enumerate(problems.items(), 1):
        geom = ConvGeometry.from_shapes((n, c, h, wd), (k, c // g, r, r), stride=s, padding=p,
                                        dilation=d, groups=g, dtype="float32")
        rng = cupy.random.default_rng(i)
        x = rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32)
        w = rng.uniform(-1, 1, geom.weight_shape, dtype=cupy.float32)
        row = {"problem": name, "shape": [n, c, h, wd, k, r, s, p, d, g], "gflop": geom.flops / 1e9,
               "ms": {}, "err": {}}
        ref = None
        if torch is not None:
            xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
            for label, tf32 in (("cudnn_fp32", False), ("cudnn_tf32", True)):
                torch.backends.cudnn.allow_tf32 = tf32
                fn = lambda: F.conv2d(xt, wt, stride=s, padding=p, dilation=d, groups=g)  # noqa: E731
                if ref is None:
                    ref = cupy.from_dlpack(fn())
                row["ms"][label] = time_gpu(fn, repeat=args.repeat)
            torch.backends.cudnn.allow_tf32 = False
        if g == 1:
            row["ms"]["im2col_matmul"] = time_gpu(lambda: im2col_matmul(x, w, geom), repeat=args.repeat)
        for m in methods:
            if m != "auto" and not FORWARD[m].applicable(geom):
                continue
            fn = lambda m=m: cupyconv.conv(x, w, stride=s, padding=p, dilation=d, groups=g, method=m)  # noqa: E731
            y = fn()
            if ref is not None:
                row["err"][m] = rel_error(y, ref)
            row["ms"][m] = time_gpu(fn, repeat=max(3, args.repeat // 3) if m == "direct" else args.repeat)
            if m == "auto":
                row["host_us_auto"] = host_overhead_us(fn)
        row["auto_choice"] = choose(geom, "auto").name
        rows.append(row)
        ours = min(row["ms"][m] for m in methods if m in row["ms"])
        ratios = "  ".join(f"{peer}/ours {row['ms'][peer] / ours:5.2f}" for peer in
                           ("cudnn_fp32", "cudnn_tf32", "im2col_matmul") if peer in row["ms"])
        print(f"[{i}/{len(problems)}] {name:22s} " + "  ".join(
            f"{kk} {v:8.3f} ms" for kk, v in row["ms"].items()) + f"  | {ratios}", flush=True)

    backward = backward_vs_cudnn(args.repeat, torch) if args.backward else None
    compile_times = cold_compile_times()
    print(f"\nfirst call in a fresh process: cold compile {compile_times['cold_compile_s']} s, "
          f"warm disk cache {compile_times['warm_disk_cache_s']} s")
    print(f"\n{'problem':22s} {'method':14s} {'ms':>9s} {'TFLOP/s':>8s} {'x cuDNN':>8s} "
          f"{'x TF32':>7s} {'x im2col':>8s} {'err':>8s}")
    for row in rows:
        for m in methods:
            if m not in row["ms"]:
                continue
            ms = row["ms"][m]
            rel = {p: (row["ms"][p] / ms if p in row["ms"] else math.nan)
                   for p in ("cudnn_fp32", "cudnn_tf32", "im2col_matmul")}
            print(f"{row['problem']:22s} {m:14s} {ms:9.3f} {row['gflop'] / ms:8.2f} "
                  f"{rel['cudnn_fp32']:8.3f} {rel['cudnn_tf32']:7.3f} {rel['im2col_matmul']:8.3f} "
                  f"{row['err'].get(m, math.nan):8.1e}"
                  + (f"  host {row['host_us_auto']:.0f} us/call" if m == "auto" else ""))
    summary = summarize(rows)
    from cupyconv._cli.ceilings import ceilings  # measured here so report.py can show % of them

    ceil = ceilings("float32")
    result = {"ceilings": {"bandwidth": ceil.bandwidth, "flops": {"float32": ceil.flops},
                           "source": ceil.source},"summary": summary, "gpu": gpu, "cupy": cupy.__version__, "torch": torch.__version__ if torch else None,
              "cudnn": torch.backends.cudnn.version() if torch else None,
              "python": platform.python_version(), "commit": git_commit(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "repeat": args.repeat,
              "compile": compile_times, "gemm": gemm_rows, "forward": rows,
              "backward": backward}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"forward-{gpu.replace(' ', '_')}-{git_commit()}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
