"""Tensor-core precisions against cuDNN and cuBLAS at the same precision (issue 16).

For each ResNet-50 layer of the suite (``bench.SUITE``, batch 32) and each precision -- float16
and bfloat16 channels-last, TF32 (float32 inputs, channels-first as PyTorch's default and
channels-last), exact float32 (channels-first) -- times cupyconv's forward, backward-data and
backward-weight against cuDNN's (``torch.nn.functional.conv2d``, ``torch.nn.grad``) with
``cudnn.benchmark = True`` (autotuned), TF32 allowed exactly where the row is TF32, 16-bit tensors
in ``channels_last``.  Operands rotate over copies spanning at least 3x the L2 cache; device time
by CUDA events (``measure.time_gpu``).  Then ``cupyconv.gemm`` against cuBLAS (``torch.matmul``)
at 4096^3 and 8192^3 in float16, bfloat16 and TF32.  Ratios are peer time / ours (> 1: ours
faster), all from this one run.  Writes ``precision-<gpu>-<commit>.json`` and a markdown table.

Run: ``python3 benchmarks/bench_precision.py --out DIR`` (about 2 minutes on an H100).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import SUITE, git_commit  # noqa: E402
from measure import time_gpu  # noqa: E402

LAYERS = ("resnet50 conv1 7x7 s2", "res2 3x3 64", "res2 1x1 64->256", "res3 3x3 128",
          "res4 3x3 256", "res5 3x3 512", "downsample 1x1 s2")
# (label, storage dtype, cupyconv precision, layout)
PRECISIONS = (("fp16", "float16", "exact", "NHWC"), ("bf16", "bfloat16", "exact", "NHWC"),
              ("tf32", "float32", "tf32", "NCHW"), ("tf32_nhwc", "float32", "tf32", "NHWC"),
              ("fp32", "float32", "exact", "NCHW"))
PASSES = ("forward", "data", "weight")


def pass_calls(torch, opts: dict, layout: str, precision: str, x_shape, w_shape):
    """``(ours, peer)``: per pass (PASSES), a call ``f(x, w, dy)`` of cupyconv (on its views, in
    ``layout``, at ``precision``; x and w of those shapes) and of cuDNN through PyTorch (on the
    tensors)."""
    F, grad = torch.nn.functional, torch.nn.grad
    ours = {
        "forward": lambda x, wt, dy: cupyconv.conv(x, wt, layout=layout, precision=precision,
                                                   **opts),
        "data": lambda x, wt, dy: cupyconv.conv_backward_data(
            dy, wt, x_shape, layout=layout, precision=precision, **opts),
        "weight": lambda x, wt, dy: cupyconv.conv_backward_weight(
            x, dy, w_shape, layout=layout, precision=precision, **opts)}
    peer = {"forward": lambda x, wt, dy: F.conv2d(x, wt, **opts),
            "data": lambda x, wt, dy: grad.conv2d_input(x.shape, wt, dy, **opts),
            "weight": lambda x, wt, dy: grad.conv2d_weight(x, wt.shape, dy, **opts)}
    return ours, peer


def layer_rows(torch, l2_bytes: int, repeat: int, only: str, labels=()) -> list[dict]:
    """One row per (layer, precision): ms of each pass for cupyconv and cuDNN, and the ratios
    (the precisions whose label is in ``labels``, or all)."""
    import cupy

    F = torch.nn.functional
    rows = []
    for name in LAYERS:
        if only and only not in name:
            continue
        n, c, h, w, k, r, s, p, d, g = SUITE[name]
        opts = dict(stride=s, padding=p, dilation=d, groups=g)
        for label, dtype, precision, layout in PRECISIONS:
            if labels and label not in labels:
                continue
            tdt = measure.torch_dtype(torch, dtype)
            cl = layout == "NHWC"
            fmt = torch.channels_last if cl else torch.contiguous_format
            gen = torch.Generator(device="cuda").manual_seed(0)
            x0 = torch.empty((n, c, h, w), device="cuda").uniform_(-1, 1, generator=gen)
            w0 = torch.empty((k, c // g, r, r), device="cuda").uniform_(-1, 1, generator=gen)
            y_shape = F.conv2d(x0[:1], w0, **opts).shape[1:]
            per_copy = (x0.numel() + w0.numel() + n * math.prod(y_shape)) * x0.element_size()
            copies = measure.rotation_copies(l2_bytes, per_copy)
            tops = []
            for i in range(copies):
                xt = torch.empty_like(x0).uniform_(-1, 1, generator=gen).to(tdt, memory_format=fmt)
                wt = torch.empty_like(w0).uniform_(-1, 1, generator=gen).to(tdt, memory_format=fmt)
                dyt = torch.empty((n, *y_shape), device="cuda").uniform_(
                    -1, 1, generator=gen).to(tdt, memory_format=fmt)
                tops.append((xt, wt, dyt))

            def ours_view(t):
                return cupy.from_dlpack(t.permute(0, 2, 3, 1) if cl else t)

            cops = [tuple(ours_view(t) for t in trip) for trip in tops]
            ours, peer = pass_calls(torch, opts, layout, precision, cops[0][0].shape,
                                    cops[0][1].shape)
            measure.set_cudnn_tf32(torch, precision == "tf32")
            row = {"layer": name, "precision": label, "dtype": dtype, "layout": layout,
                   "copies": copies, "ms": {}, "cudnn_ms": {}, "ratio": {}}
            for pas in PASSES:
                row["ms"][pas] = time_gpu(measure.rotating(lambda o, f=ours[pas]: f(*o), cops),
                                          repeat=repeat)
                row["cudnn_ms"][pas] = time_gpu(
                    measure.rotating(lambda o, f=peer[pas]: f(*o), tops), repeat=repeat)
                row["ratio"][pas] = row["cudnn_ms"][pas] / row["ms"][pas]
            measure.set_cudnn_tf32(torch, False)
            rows.append(row)
            print(f"{name:22s} {label:9s} " + "  ".join(
                f"{pas} {row['ms'][pas]:.4f}/{row['cudnn_ms'][pas]:.4f} ({row['ratio'][pas]:.2f}x)"
                for pas in PASSES), flush=True)
    return rows


def gemm_rows(torch, sizes, repeat: int, labels=()) -> list[dict]:
    """cupyconv.gemm against cuBLAS (torch.matmul) per size and precision (those in ``labels``,
    or all)."""
    import cupy

    rows = []
    for size in sizes:
        for label, dtype, precision in (("fp16", "float16", "exact"), ("bf16", "bfloat16", "exact"),
                                        ("tf32", "float32", "tf32"), ("fp32", "float32", "exact")):
            if labels and label not in labels:
                continue
            gen = torch.Generator(device="cuda").manual_seed(size)
            at = torch.empty((size, size), device="cuda").uniform_(-1, 1, generator=gen)
            bt = torch.empty((size, size), device="cuda").uniform_(-1, 1, generator=gen)
            tdt = measure.torch_dtype(torch, dtype)
            at, bt = at.to(tdt), bt.to(tdt)
            a, b = cupy.from_dlpack(at), cupy.from_dlpack(bt)
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            ours = time_gpu(lambda: cupyconv.gemm(a, b, precision=precision), repeat=repeat)
            peer = time_gpu(lambda: torch.matmul(at, bt), repeat=repeat)
            torch.backends.cuda.matmul.allow_tf32 = False
            flop = 2 * size ** 3
            rows.append({"size": size, "precision": label, "ms": ours, "cublas_ms": peer,
                         "tflops": flop / ours / 1e9, "cublas_tflops": flop / peer / 1e9,
                         "ratio": peer / ours})
            print(f"GEMM {size}^3 {label}: ours {flop / ours / 1e9:.0f} TFLOP/s, cuBLAS "
                  f"{flop / peer / 1e9:.0f} TFLOP/s, {peer / ours:.2f}x", flush=True)
    return rows


def summary(rows) -> dict:
    """Geomean and minimum of cuDNN / ours per (precision, pass) over the layers."""
    out = {}
    for label, *_ in PRECISIONS:
        for pas in PASSES:
            vals = [r["ratio"][pas] for r in rows if r["precision"] == label]
            if vals:
                out[f"{label}/{pas}"] = {"geomean": measure.geomean(vals), "min": min(vals)}
    return out


def markdown(result: dict) -> str:
    """The per-layer ratio table (cuDNN ms / ours ms) and the GEMM rows."""
    lines = [f"GPU {result['gpu']}, commit {result['commit']}; ratio = cuDNN time / cupyconv time "
             "(> 1: cupyconv faster), cuDNN autotuned at the same precision.", "",
             "| layer | precision | forward | backward-data | backward-weight |",
             "|---|---|---|---|---|"]
    for r in result["layers"]:
        cells = [f"{r['ratio'][p]:.2f}x ({r['ms'][p]:.3f} ms)" for p in PASSES]
        lines.append(f"| {r['layer']} | {r['precision']} ({r['layout']}) | " + " | ".join(cells) + " |")
    lines += ["", "| precision | pass | geomean | min |", "|---|---|---|---|"]
    for key, v in result["summary"].items():
        lab, pas = key.split("/")
        lines.append(f"| {lab} | {pas} | {v['geomean']:.2f}x | {v['min']:.2f}x |")
    lines += ["", "| GEMM | precision | cupyconv TFLOP/s | cuBLAS TFLOP/s | ratio |",
              "|---|---|---|---|---|"]
    for g in result["gemm"]:
        lines.append(f"| {g['size']}^3 | {g['precision']} | {g['tflops']:.0f} | "
                     f"{g['cublas_tflops']:.0f} | {g['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--only", default="", help="layers whose name contains this")
    parser.add_argument("--gemm", default="4096,8192", help="GEMM sizes ('' to skip)")
    parser.add_argument("--precision", default="",
                        help="comma-separated precision labels to run (default: all): "
                             + ", ".join(p[0] for p in PRECISIONS))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    torch = measure.load_torch(quiet=True)  # the message below says it
    if torch is None:
        print("bench_precision needs PyTorch with CUDA (the cuDNN / cuBLAS peer)", file=sys.stderr)
        return 2
    labels = tuple(v for v in args.precision.split(",") if v)
    unknown = set(labels) - {p[0] for p in PRECISIONS}
    if unknown:
        parser.error(f"--precision: unknown label(s) {sorted(unknown)}")
    facts = measure.device_facts()
    result = {**facts, **measure.torch_facts(torch), "commit": git_commit(),
              "layers": layer_rows(torch, facts["l2_bytes"], args.repeat, args.only, labels)}
    result["summary"] = summary(result["layers"])
    sizes = [int(v) for v in args.gemm.split(",") if v]
    result["gemm"] = gemm_rows(torch, sizes, max(3, args.repeat // 4), labels) if sizes else []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"precision-{facts['gpu'].replace(' ', '_')}-{result['commit']}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
