"""Depthwise and separable benchmark (issue 5): our kernels against cuDNN, in GB/s of the copy ceiling.

    python3 benchmarks/bench_depthwise.py [--repeat 30]

MobileNetV2's depthwise 3x3 layers (144 ch, 56^2) and (960 ch, 7^2), batch 32: forward,
backward-data and backward-weight against cuDNN through PyTorch (TF32 off); the same passes in
channels-last (NHWC) for (144 ch, 56^2) with 3x3 and 5x5 filters at stride 1 and 2 in float32,
float16 and bfloat16, against PyTorch's channels-last memory format; the separable layer
depthwise 3x3 -> pointwise 1x1 (144 -> 24, 56^2, batch 32) fused, unfused, and as cuDNN's two
calls, in float32 and float16.  Each result is checked against cuDNN's.  GB/s counts the bytes a
perfect kernel must move (inputs read once, outputs written once) against the measured
device-to-device copy bandwidth.  Writes JSON under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.timing import host_overhead_us, time_gpu  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402

from bench import git_commit  # noqa: E402
from measure import copy_bandwidth  # noqa: E402

DEPTHWISE = {"dw 3x3 144 56^2": (32, 144, 56), "dw 3x3 960 7^2": (32, 960, 7)}
# channels-last: (n, c, hw, kernel, stride), padding kernel // 2
CHANNELS_LAST = {"nhwc dw 3x3 144 56^2": (32, 144, 56, 3, 1),
                 "nhwc dw 3x3 s2 144 56^2": (32, 144, 56, 3, 2),
                 "nhwc dw 5x5 144 56^2": (32, 144, 56, 5, 1),
                 "nhwc dw 5x5 s2 144 56^2": (32, 144, 56, 5, 2)}
SEPARABLE = {"sep 3x3 144->24 56^2": (32, 144, 56, 24)}
ITEM = {"float32": 4, "float16": 2, "bfloat16": 2}


def _report(name, kind, row, bw):
    ours = row["ms"]["ours"]
    gbs = row["bytes"] / (ours * 1e-3)
    row["GBps"] = gbs / 1e9
    row["frac_copy"] = gbs / bw
    peers = {k: v / ours for k, v in row["ms"].items() if k != "ours"}
    row["speedup"] = peers
    print(f"{name:24s} {kind:14s} {row['dtype']:8s} ours {ours:7.4f} ms  {gbs / 1e9:7.0f} GB/s "
          f"({100 * gbs / bw:4.1f} % of copy)  " + "  ".join(
              f"{k} {v:.4f} ms ({peers[k]:.2f}x)" for k, v in row["ms"].items() if k != "ours")
          + f"  err {row['err']:.1e}", flush=True)


def _measure(name, dtype, passes, to_ours, bw, repeat) -> list[dict]:
    """One row per pass of ``passes`` (kind -> (ours, peer, bytes moved)): the error of ours
    against the peer's result (seen through ``to_ours``), both device times, our host overhead."""
    import cupy

    rows = []
    for kind, (ours, peer, nbytes) in passes.items():
        err = rel_error(ours(), to_ours(peer()).astype(cupy.float64))
        row = {"problem": name, "pass": kind, "dtype": dtype, "bytes": nbytes, "err": err,
               "ms": {"ours": time_gpu(ours, repeat=repeat), "cudnn": time_gpu(peer, repeat=repeat)},
               "host_us": host_overhead_us(ours)}
        _report(name, kind, row, bw)
        rows.append(row)
    return rows


def depthwise_rows(repeat, torch, bw):
    import cupy
    import torch.nn.functional as F

    rows = []
    for name, (n, c, hw) in DEPTHWISE.items():
        for dtype in ("float32", "float16"):
            geom = ConvGeometry.from_shapes((n, c, hw, hw), (c, 1, 3, 3), padding=1, groups=c,
                                            dtype=dtype)
            rng = cupy.random.default_rng(3)
            x = rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32).astype(dtype)
            w = rng.uniform(-1, 1, geom.weight_shape, dtype=cupy.float32).astype(dtype)
            dy = rng.uniform(-1, 1, geom.output_shape, dtype=cupy.float32).astype(dtype)
            xt, wt, dyt = (torch.from_dlpack(a) for a in (x, w, dy))
            it = ITEM[dtype]
            act = n * c * hw * hw * it
            passes = {
                "forward": (lambda: cupyconv.conv(x, w, padding=1, groups=c),
                            lambda: F.conv2d(xt, wt, padding=1, groups=c), 2 * act),
                "backward-data": (lambda: cupyconv.conv_backward_data(dy, w, x.shape, padding=1, groups=c),
                                  lambda: torch.nn.grad.conv2d_input(xt.shape, wt, dyt, padding=1, groups=c),
                                  2 * act),
                "backward-weight": (lambda: cupyconv.conv_backward_weight(x, dy, w.shape, padding=1, groups=c),
                                    lambda: torch.nn.grad.conv2d_weight(xt, wt.shape, dyt, padding=1, groups=c),
                                    2 * act),
            }
            rows += _measure(name, dtype, passes, cupy.from_dlpack, bw, repeat)
    return rows


def channels_last_rows(repeat, torch, bw):
    """The depthwise passes on NHWC arrays; PyTorch gets the same memory as NCHW-shaped tensors
    in its channels-last format (cuDNN's NHWC kernels)."""
    import cupy
    import torch.nn.functional as F

    from cupyconv._core.dtypes import numpy_dtype

    rows = []
    for name, (n, c, hw, k, s) in CHANNELS_LAST.items():
        for dtype in ("float32", "float16", "bfloat16"):
            opts = dict(stride=s, padding=k // 2, groups=c)
            geom = ConvGeometry.from_shapes((n, hw, hw, c), (c, k, k, 1), layout="NHWC",
                                            dtype=dtype, **opts)
            rng = cupy.random.default_rng(3)
            try:  # NHWC memory seen as (N, C, H, W) tensors in channels-last format
                x, w, dy = (rng.uniform(-1, 1, shape, dtype=cupy.float32).astype(numpy_dtype(dtype))
                            for shape in (geom.input_shape, geom.weight_shape, geom.output_shape))
                xt, wt, dyt = (torch.from_dlpack(a).permute(0, 3, 1, 2) for a in (x, w, dy))
            except Exception as exc:  # (a CuPy or PyTorch without bfloat16 arrays or DLPack exchange)
                print(f"{name:24s} {dtype:8s} skipped: {exc}", flush=True)
                continue
            nhwc = lambda t: cupy.from_dlpack(t.permute(0, 2, 3, 1).contiguous())  # noqa: E731
            act_in = n * c * hw * hw * ITEM[dtype]
            act_out = math.prod(geom.output_shape) * ITEM[dtype]
            passes = {
                "forward": (lambda: cupyconv.conv(x, w, layout="NHWC", **opts),
                            lambda: F.conv2d(xt, wt, **opts), act_in + act_out),
                "backward-data": (lambda: cupyconv.conv_backward_data(dy, w, x.shape, layout="NHWC", **opts),
                                  lambda: torch.nn.grad.conv2d_input(xt.shape, wt, dyt, **opts),
                                  act_in + act_out),
                "backward-weight": (lambda: cupyconv.conv_backward_weight(x, dy, w.shape, layout="NHWC", **opts),
                                    lambda: torch.nn.grad.conv2d_weight(xt, wt.shape, dyt, **opts),
                                    act_in + act_out),
            }
            rows += _measure(name, dtype, passes, nhwc, bw, repeat)
    return rows


def separable_rows(repeat, torch, bw):
    import cupy
    import torch.nn.functional as F

    rows = []
    for name, (n, c, hw, kp) in SEPARABLE.items():
        for dtype in ("float32", "float16"):
            rng = cupy.random.default_rng(5)
            u = lambda *s: rng.uniform(-1, 1, s, dtype=cupy.float32).astype(dtype)  # noqa: E731
            x, wd, wp, bd, bp = u(n, c, hw, hw), u(c, 1, 3, 3), u(kp, c, 1, 1), u(c), u(kp)
            xt, wdt, wpt, bdt, bpt = (torch.from_dlpack(a) for a in (x, wd, wp, bd, bp))
            it = ITEM[dtype]
            nbytes = (n * c * hw * hw + n * kp * hw * hw) * it
            peer = lambda: F.conv2d(F.relu6(F.conv2d(xt, wdt, bdt, padding=1, groups=c)), wpt, bpt)  # noqa: E731
            ref = cupy.from_dlpack(peer()).astype(cupy.float64)
            variants = {m: (lambda m=m: cupyconv.separable_conv(x, wd, wp, bd, bp, padding=1,
                                                                activation="relu6", method=m))
                        for m in ("fused", "unfused", "auto")}
            errs = {m: rel_error(f(), ref) for m, f in variants.items()}
            times = {m: time_gpu(f, repeat=repeat) for m, f in variants.items()}
            row = {"problem": name, "pass": "separable", "dtype": dtype, "bytes": nbytes,
                   "err": max(errs.values()), "errs": errs,
                   "ms": {"ours": times["auto"], "cudnn_two_calls": time_gpu(peer, repeat=repeat),
                          "ours_unfused": times["unfused"], "ours_fused": times["fused"]},
                   "host_us": host_overhead_us(variants["auto"])}
            _report(name, "separable", row, bw)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    import cupy

    torch = measure.require_torch("bench_depthwise")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    gpu = dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"]
    bw = copy_bandwidth()
    print(f"GPU {gpu}; cupy {cupy.__version__}; torch {torch.__version__}; cuDNN "
          f"{torch.backends.cudnn.version()}; commit {git_commit()}; copy {bw / 1e12:.2f} TB/s", flush=True)
    rows = (depthwise_rows(args.repeat, torch, bw) + channels_last_rows(args.repeat, torch, bw)
            + separable_rows(args.repeat, torch, bw))
    targets = {}
    for r in rows:
        key = f"{r['problem']} {r['pass']} {r['dtype']}"
        targets[key] = {k: round(v, 3) for k, v in r["speedup"].items()}
        targets[key]["frac_copy"] = round(r["frac_copy"], 3)
    print("\nspeedups (peer ms / ours ms) and fraction of copy bandwidth:")
    for k, v in targets.items():
        print(f"  {k:48s} {v}")
    result = {"gpu": gpu, "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "cupy": cupy.__version__, "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "copy_bandwidth_Bps": bw,
              "repeat": args.repeat, "rows": rows, "summary": targets}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"depthwise-{gpu.replace(' ', '_')}-{git_commit()}.json"
    path.write_text(json.dumps(result, indent=1, default=lambda o: None if isinstance(o, float) and math.isnan(o) else o))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
