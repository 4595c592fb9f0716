"""Forward-convolution benchmark: every cupyconv method against cuDNN and im2col + cupy.matmul.

    python3 benchmarks/bench.py [--repeat 30] [--only res2] [--no-fp16] [--no-wall] [--out DIR]

Runs the forward problems of the public suite (DESIGN.md section 4), checks each result against
cuDNN (TF32 off), prints ms / TFLOP/s / ratios, and writes JSON (GPU, versions, commit) under
benchmarks/results/.  Peers run in the same process on the same inputs; every time is the median
of CUDA-event samples after warm-up, each sample over back-to-back calls so that device time, not
Python launch overhead, is measured (the host time per `auto` call is reported beside it).  Ratios
> 1 mean cupyconv is faster.

Peers at their best and at their default (issue 15): cuDNN autotuned
(``torch.backends.cudnn.benchmark = True``) with TF32 off (``cudnn_fp32``, exact like cupyconv)
and on (``cudnn_tf32``, PyTorch's default for convolutions); in float16 (``fp16`` of each row)
cupyconv NCHW (``auto``) and NHWC (``auto_nhwc``) beside cuDNN NCHW (``cudnn_fp16``) and
channels_last (``cudnn_fp16_cl``).  Operands rotate: each problem keeps R copies of its input
and weight (R = ceil(3 x L2 / their bytes), at most 8) and each call takes the next, for
cupyconv and the peers alike, so no call finds its operands in L2.  Beside the device time
(``ms``) every entry has a wall time (``wall_ms``: perf_counter around a loop of calls ending in
a device synchronize, per call; not for the slow ``direct`` reference method).
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402
from cupyconv._dispatch.choose import choose  # noqa: E402
from cupyconv._dispatch.forward import FORWARD  # noqa: E402
from measure import host_overhead_us, time_gpu  # noqa: E402

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


def backward_vs_cudnn(repeat: int, torch, l2_bytes: int = 0, wall=None) -> dict:
    """Our backward-data / backward-weight against cuDNN's (torch.nn.grad, TF32 off, autotuned),
    each on R rotated copies of (x, w, dy).  ``wall(fn, copies)``, when given, adds the wall ms
    per call of each (``<kind>_wall_ms``, ``cudnn_<kind>_wall_ms``)."""
    import cupy

    rows, ratios = [], {"data": [], "weight": []}
    for name, (n, c, h, w, k, r, s, p) in BACKWARD.items():
        geom = ConvGeometry.from_shapes((n, c, h, w), (k, c, r, r), stride=s, padding=p)
        rng = cupy.random.default_rng(7)
        nbytes = 4 * sum(math.prod(t) for t in (geom.input_shape, geom.weight_shape,
                                                  geom.output_shape))
        copies = measure.rotation_copies(l2_bytes, nbytes)
        ops = [tuple(rng.uniform(-1, 1, shape, dtype=cupy.float32)
                     for shape in (geom.input_shape, geom.weight_shape, geom.output_shape))
               for _ in range(copies)]
        x, wt, dy = ops[0]
        ours = {"data": lambda x, wt, dy: cupyconv.conv_backward_data(dy, wt, x.shape, stride=s,
                                                                      padding=p),
                "weight": lambda x, wt, dy: cupyconv.conv_backward_weight(x, dy, wt.shape, stride=s,
                                                                          padding=p)}
        row = {"problem": name, "gflop": geom.flops / 1e9, "copies": copies}
        for kind, fn in ours.items():
            call = measure.rotating(lambda o, fn=fn: fn(*o), ops)
            row[f"{kind}_ms"] = time_gpu(call, repeat=repeat)
            if wall is not None:
                row[f"{kind}_wall_ms"] = wall(call, copies)
        if torch is not None:
            measure.set_cudnn_tf32(torch, False)
            tops = [tuple(torch.from_dlpack(a) for a in o) for o in ops]
            grad = torch.nn.grad
            peers = {"data": lambda xt, wtt, dyt: grad.conv2d_input(xt.shape, wtt, dyt, stride=s,
                                                                    padding=p),
                     "weight": lambda xt, wtt, dyt: grad.conv2d_weight(xt, wtt.shape, dyt, stride=s,
                                                                       padding=p)}
            for kind, fn in peers.items():
                ref = cupy.from_dlpack(fn(*tops[0]))
                row[f"{kind}_err"] = rel_error(ours[kind](x, wt, dy), ref)
                call = measure.rotating(lambda o, fn=fn: fn(*o), tops)
                row[f"cudnn_{kind}_ms"] = time_gpu(call, repeat=repeat)
                if wall is not None:
                    row[f"cudnn_{kind}_wall_ms"] = wall(call, copies)
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


def rotated_operands(rng, geom, copies: int) -> list[tuple]:
    """``copies`` (x, w) pairs of uniform(-1, 1) float32 values (NCHW)."""
    import cupy

    return [(rng.uniform(-1, 1, geom.input_shape, dtype=cupy.float32),
             rng.uniform(-1, 1, geom.weight_shape, dtype=cupy.float32)) for _ in range(copies)]


def time_entry(store: dict, key: str, fn_of, operands, repeat: int, wall=None) -> None:
    """Device ms (``store["ms"][key]``) and, with ``wall``, wall ms (``store["wall_ms"][key]``)
    per call of ``fn_of(*operands[i])``, i rotating over the copies call by call."""
    call = measure.rotating(lambda ops: fn_of(*ops), operands)
    store["ms"][key] = time_gpu(call, repeat=repeat)
    if wall is not None:
        store["wall_ms"][key] = wall(call, len(operands))


def fp16_entries(operands, opts: dict, ref, torch, repeat: int, wall=None) -> dict:
    """The float16 columns of one problem on the same (rotated) values rounded to float16:
    cupyconv NCHW ("auto") and NHWC ("auto_nhwc") beside cuDNN NCHW ("cudnn_fp16") and
    channels_last ("cudnn_fp16_cl", the NHWC arrays seen as channels_last tensors).  ``err``:
    each against the float32 cuDNN result ``ref`` (TF32 off)."""
    import cupy

    half = [(x.astype(cupy.float16), w.astype(cupy.float16)) for x, w in operands]
    nhwc = [tuple(cupy.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in pair) for pair in half]
    variants = {"auto": (lambda x, w: cupyconv.conv(x, w, **opts), half, False),
                "auto_nhwc": (lambda x, w: cupyconv.conv(x, w, layout="NHWC", **opts), nhwc, True)}
    if torch is not None:
        import torch.nn.functional as F

        measure.set_cudnn_tf32(torch, False)
        cl = torch.channels_last
        conv_t = lambda x, w: F.conv2d(x, w, **opts)  # noqa: E731
        variants["cudnn_fp16"] = (conv_t, [tuple(torch.from_dlpack(a) for a in pair)
                                           for pair in half], False)
        variants["cudnn_fp16_cl"] = (conv_t, [tuple(torch.from_dlpack(a).permute(0, 3, 1, 2)
                                                    .to(memory_format=cl) for a in pair)
                                              for pair in nhwc], False)
    out = {"ms": {}, "wall_ms": {}, "err": {}}
    for key, (fn_of, ops, channels_last) in variants.items():
        y = fn_of(*ops[0])
        if ref is not None:
            out["err"][key] = measure.rel_err_gpu(y.transpose(0, 3, 1, 2) if channels_last else y,
                                                  ref)
        time_entry(out, key, fn_of, ops, repeat, wall)
    return out


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


# (cupyconv entry, peer entry) pairs of the peer summary: peer time / ours (> 1: ours faster)
PEER_PAIRS = {"float32": [("auto", "cudnn_fp32"), ("auto", "cudnn_tf32"),
                          ("auto", "im2col_matmul")],
              "float16": [("auto", "cudnn_fp16"), ("auto", "cudnn_fp16_cl"),
                          ("auto_nhwc", "cudnn_fp16"), ("auto_nhwc", "cudnn_fp16_cl")]}


def peer_summary(rows) -> dict:
    """Geomean over the problems of peer / cupyconv, per time (device ``ms``, ``wall_ms``) and
    dtype: ``{"ms": {"float32": {"auto/cudnn_fp32": 1.1, ...}, "float16": {...}},
    "wall_ms": {...}}``."""
    out = {}
    for time_key in ("ms", "wall_ms"):
        out[time_key] = {}
        for dtype, pairs in PEER_PAIRS.items():
            stores = [r if dtype == "float32" else r.get("fp16") for r in rows]
            stores = [st[time_key] for st in stores if st and st.get(time_key)]
            out[time_key][dtype] = {
                f"{ours}/{peer}": measure.geomean(measure.ratio(st.get(peer), st.get(ours))
                                                   for st in stores)
                for ours, peer in pairs}
    return out


def wall_timer(args):
    """``wall(fn, copies)``: wall ms per call (measure.wall_ms with the command line's loop
    settings, loops a multiple of ``copies`` long), or None under ``--no-wall``."""
    if not args.wall:
        return None
    return lambda fn, copies: measure.wall_ms(fn, multiple=copies, repeat=args.wall_repeat,
                                              target_ms=args.wall_target_ms)


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
    parser.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=True,
                        help="float16 columns: cupyconv NCHW/NHWC, cuDNN NCHW/channels_last")
    parser.add_argument("--wall", action=argparse.BooleanOptionalAction, default=True,
                        help="wall time per call beside the device time")
    parser.add_argument("--wall-repeat", type=int, default=3, help="timed loops per wall time")
    parser.add_argument("--wall-target-ms", type=float, default=20.0,
                        help="length of one timed wall loop")
    args = parser.parse_args(argv)

    import cupy

    torch = measure.load_torch()  # cudnn.benchmark = True: cuDNN at its best
    if torch is not None:
        import torch.nn.functional as F
    facts = measure.device_facts()
    gpu, l2 = facts["gpu"], facts["l2_bytes"]
    methods = [m for m in args.methods.split(",") if m]
    wall = wall_timer(args)
    print(f"GPU {gpu} (L2 {l2 / 2 ** 20:.0f} MiB); cupy {cupy.__version__}; torch "
          f"{torch.__version__ if torch else 'absent'}; commit {git_commit()}", flush=True)
    gemm_rows = gemm_vs_cublas([int(v) for v in args.gemm.split(",") if v], args.repeat)
    rows = []
    problems = {k: v for k, v in SUITE.items() if args.only in k}
    for i, (name, (n, c, h, wd, k, r, s, p, d, g)) in enumerate(problems.items(), 1):
        geom = ConvGeometry.from_shapes((n, c, h, wd), (k, c // g, r, r), stride=s, padding=p,
                                        dilation=d, groups=g, dtype="float32")
        opts = dict(stride=s, padding=p, dilation=d, groups=g)
        copies = measure.rotation_copies(
            l2, 4 * (math.prod(geom.input_shape) + math.prod(geom.weight_shape)))
        operands = rotated_operands(cupy.random.default_rng(i), geom, copies)
        x, w = operands[0]
        row = {"problem": name, "shape": [n, c, h, wd, k, r, s, p, d, g], "gflop": geom.flops / 1e9,
               "copies": copies, "ms": {}, "wall_ms": {}, "err": {}}
        ref = None
        if torch is not None:
            t_operands = [(torch.from_dlpack(a), torch.from_dlpack(b)) for a, b in operands]
            conv_t = lambda xt, wt: F.conv2d(xt, wt, **opts)  # noqa: E731
            for label, tf32 in (("cudnn_fp32", False), ("cudnn_tf32", True)):
                measure.set_cudnn_tf32(torch, tf32)
                if ref is None:
                    ref = cupy.from_dlpack(conv_t(*t_operands[0]))
                time_entry(row, label, conv_t, t_operands, args.repeat, wall)
            measure.set_cudnn_tf32(torch, False)
        if g == 1:
            time_entry(row, "im2col_matmul", lambda a, b: im2col_matmul(a, b, geom), operands,
                       args.repeat, wall)
        for m in methods:
            if m != "auto" and not FORWARD[m].applicable(geom):
                continue
            conv_m = lambda a, b, m=m: cupyconv.conv(a, b, method=m, **opts)  # noqa: E731
            y = conv_m(x, w)
            if ref is not None:
                row["err"][m] = rel_error(y, ref)
            if m == "direct":  # the slow reference: fewer samples, no wall time
                time_entry(row, m, conv_m, operands, max(3, args.repeat // 3))
            else:
                time_entry(row, m, conv_m, operands, args.repeat, wall)
            if m == "auto":
                row["host_us_auto"] = host_overhead_us(lambda: conv_m(x, w))
        row["auto_choice"] = choose(geom, "auto").name
        if args.fp16:
            row["fp16"] = fp16_entries(operands, opts, ref, torch, args.repeat, wall)
        rows.append(row)
        ours = min(row["ms"][m] for m in methods if m in row["ms"])
        ratios = "  ".join(f"{peer}/ours {row['ms'][peer] / ours:5.2f}" for peer in
                           ("cudnn_fp32", "cudnn_tf32", "im2col_matmul") if peer in row["ms"])
        print(f"[{i}/{len(problems)}] {name:22s} (x{copies}) " + "  ".join(
            f"{kk} {v:8.3f} ms" for kk, v in row["ms"].items()) + f"  | {ratios}", flush=True)
        if args.fp16:
            print("    fp16 " + "  ".join(f"{kk} {v:8.3f} ms"
                                       for kk, v in row["fp16"]["ms"].items()), flush=True)

    backward = backward_vs_cudnn(args.repeat, torch, l2, wall) if args.backward else None
    compile_times = cold_compile_times()
    print(f"\nfirst call in a fresh process: cold compile {compile_times['cold_compile_s']} s, "
          f"warm disk cache {compile_times['warm_disk_cache_s']} s")
    print(f"\n{'problem':22s} {'method':14s} {'ms':>9s} {'wall ms':>9s} {'TFLOP/s':>8s} "
          f"{'x cuDNN':>8s} {'x TF32':>7s} {'x im2col':>8s} {'err':>8s}")
    for row in rows:
        for m in methods:
            if m not in row["ms"]:
                continue
            ms = row["ms"][m]
            rel = {p: (row["ms"][p] / ms if p in row["ms"] else math.nan)
                   for p in ("cudnn_fp32", "cudnn_tf32", "im2col_matmul")}
            print(f"{row['problem']:22s} {m:14s} {ms:9.3f} {row['wall_ms'].get(m, math.nan):9.3f} "
                  f"{row['gflop'] / ms:8.2f} "
                  f"{rel['cudnn_fp32']:8.3f} {rel['cudnn_tf32']:7.3f} {rel['im2col_matmul']:8.3f} "
                  f"{row['err'].get(m, math.nan):8.1e}"
                  + (f"  host {row['host_us_auto']:.0f} us/call" if m == "auto" else ""))
    if args.fp16:
        keys = ("auto", "auto_nhwc", "cudnn_fp16", "cudnn_fp16_cl")
        print(f"\n{'problem (float16)':22s} " + " ".join(f"{kk + ' ms':>17s}" for kk in keys)
              + f" {'err auto':>9s}")
        for row in rows:
            f16 = row["fp16"]
            print(f"{row['problem']:22s} " + " ".join(f"{f16['ms'].get(kk, math.nan):17.3f}"
                                                       for kk in keys)
                  + f" {f16['err'].get('auto', math.nan):9.1e}")
    summary = summarize(rows)
    peers = peer_summary(rows)
    for time_key, by_dtype in peers.items():
        for dtype, vals in by_dtype.items():
            got = {kk: v for kk, v in vals.items() if v is not None}
            if got:
                print(f"geomean peer/ours ({time_key}, {dtype}): "
                      + ", ".join(f"{kk} {v:.3f}x" for kk, v in got.items()))
    from cupyconv._cli.ceilings import ceilings  # measured here so report.py can show % of them

    ceil = ceilings("float32")
    result = {"ceilings": {"bandwidth": ceil.bandwidth, "flops": {"float32": ceil.flops},
                           "source": ceil.source},
              "summary": summary, "peer_summary": peers, "gpu": gpu, "l2_bytes": l2,
              "cupy": cupy.__version__, "torch": torch.__version__ if torch else None,
              "cudnn": torch.backends.cudnn.version() if torch else None,
              "python": platform.python_version(), "commit": git_commit(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "repeat": args.repeat,
              "settings": {"cudnn_benchmark": torch is not None, "l2_factor": measure.L2_FACTOR,
                           "max_copies": measure.MAX_COPIES, "wall_repeat": args.wall_repeat,
                           "wall_target_ms": args.wall_target_ms, "fp16": args.fp16,
                           "wall": args.wall},
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
