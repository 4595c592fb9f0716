"""Grouped convolution (issue 17 item 2) against cuDNN on the ResNeXt-50 (32x4d) 3x3 layers.

Forward (and with ``--backward`` the two gradients), correctness first.

    python3 benchmarks/exp_grouped.py [--repeat 20] [--only 28] [--stride2] [--backward]
                                      [--sweep] [--out DIR]

Layers: 32 groups, widths 128/256/512/1024 (4/8/16/32 channels per group) at 56/28/14/7 pixels,
batch 32, 3x3 pad 1 stride 1 (``--stride2`` adds the stride-2 first blocks of stages 2-4).  Rows:
float32 channels-first (cuDNN with TF32 off: the issue's >= 1.0x target), float16 channels-last
(``channels_last`` tensors: the >= 0.5x target), float16 channels-first, bfloat16 channels-last
and TF32 channels-first (cuDNN with TF32 on).  Per row: cupyconv ``auto`` and each applicable
method, cuDNN autotuned (``cudnn.benchmark``), the cost model's estimate of each method (to
calibrate ``_direct.grouped`` and the merge choice), the merge factor and register tile that
``auto`` plans, and the relative error of ``auto`` against a float64 convolution.  ``--sweep``
also times the implicit GEMM with every merge factor forced (``grouped.forced_merge``; each factor's
call is prepared once under the hook and then replayed, so the host's planning stays out of the
time, as it does for warm calls of the public functions).  Operands
rotate over copies spanning 3x the L2 cache; device time by CUDA events (``measure.time_gpu``);
ratios are cuDNN time / ours (> 1: ours faster).  Writes ``grouped-<gpu>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import git_commit  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402
from cupyconv._dispatch.choose import describe  # noqa: E402
from cupyconv._dispatch.forward import FORWARD  # noqa: E402
from cupyconv._gemm.grouped import forced_merge, merge_factors  # noqa: E402
from measure import time_gpu  # noqa: E402

# (width, input size, stride): ResNeXt-50 32x4d conv2 of each stage, and the stride-2 first blocks
LAYERS = [(128, 56, 1), (256, 28, 1), (512, 14, 1), (1024, 7, 1)]
STRIDE2 = [(256, 56, 2), (512, 28, 2), (1024, 14, 2)]
GROUPS, BATCH = 32, 32
# (label, storage dtype, cupyconv precision, layout); cuDNN's TF32 on exactly for the TF32 row
ROWS = [("fp32", "float32", "exact", "NCHW"), ("fp16_cl", "float16", "exact", "NHWC"),
        ("fp16", "float16", "exact", "NCHW"), ("bf16_cl", "bfloat16", "exact", "NHWC"),
        ("tf32", "float32", "tf32", "NCHW")]
PASSES = ("forward", "data", "weight")


def _torch_dtype(torch, dtype):
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]


def layer_row(torch, l2_bytes, layer, row, args) -> dict:
    import cupy

    F, grad = torch.nn.functional, torch.nn.grad
    width, size, stride = layer
    label, dtype, precision, layout = row
    cl = layout == "NHWC"
    fmt = torch.channels_last if cl else torch.contiguous_format
    opts = dict(stride=stride, padding=1, groups=GROUPS)
    gen = torch.Generator(device="cuda").manual_seed(width)
    x0 = torch.empty((BATCH, width, size, size), device="cuda").uniform_(-1, 1, generator=gen)
    w0 = torch.empty((width, width // GROUPS, 3, 3), device="cuda").uniform_(-1, 1, generator=gen)
    y_shape = F.conv2d(x0[:1], w0, **opts).shape[1:]
    per_copy = (x0.numel() + w0.numel() + BATCH * math.prod(y_shape)) * x0.element_size()
    copies = measure.rotation_copies(l2_bytes, per_copy)
    tdt = _torch_dtype(torch, dtype)
    tops = []
    for _ in range(copies):
        tops.append(tuple(t.uniform_(-1, 1, generator=gen).to(tdt, memory_format=fmt) for t in
                          (torch.empty_like(x0), torch.empty_like(w0),
                           torch.empty((BATCH, *y_shape), device="cuda"))))

    def ours_view(t):
        return cupy.from_dlpack(t.permute(0, 2, 3, 1) if cl else t)

    cops = [tuple(ours_view(t) for t in trip) for trip in tops]
    x_shape, w_shape = cops[0][0].shape, cops[0][1].shape
    geom = replace(ConvGeometry.from_shapes(x_shape, w_shape, layout=layout, dtype=dtype, **opts),
                   precision=precision)
    kw = dict(layout=layout, precision=precision, **opts)
    measure.set_cudnn_tf32(torch, precision == "tf32")
    info = describe(geom)
    out = {"layer": f"{width}@{size}s{stride}", "row": label, "dtype": dtype, "layout": layout,
           "copies": copies, "auto": info["algorithm"], "merge": (info["gemm"] or {}).get("merge"),
           "tile": (info["gemm"] or {}).get("tile"), "ms": {}, "estimate_ms": {}, "cudnn_ms": {}}
    # correctness of auto first: against a float64 convolution of the same operands (on the host,
    # where bfloat16 converts through ml_dtypes)
    xt, wt, dyt = tops[0]
    ref = F.conv2d(xt.double(), wt.double(), **opts)
    peer = F.conv2d(xt, wt, **opts).double()
    out["cudnn_err"] = float((peer - ref).norm() / ref.norm())
    ref = (ref.permute(0, 2, 3, 1) if cl else ref).contiguous().cpu().numpy()
    out["err"] = rel_error(cupyconv.conv(cops[0][0], cops[0][1], **kw), ref)
    # forward: auto, every applicable method (direct only where it is not hopeless), cuDNN
    methods = ["auto"] + [m for m, a in FORWARD.items() if a.applicable(geom)]
    for m in methods:
        if m == "direct" and not args.direct:
            continue
        out["ms"][m] = time_gpu(measure.rotating(
            lambda o, m=m: cupyconv.conv(o[0], o[1], method=m, **kw), cops), repeat=args.repeat)
        if m != "auto":
            out["estimate_ms"][m] = describe(geom, m)["estimated_ms"]
    out["cudnn_ms"]["forward"] = time_gpu(measure.rotating(
        lambda o: F.conv2d(o[0], o[1], **opts), tops), repeat=args.repeat)
    out["ratio"] = {"forward": out["cudnn_ms"]["forward"] / out["ms"]["auto"]}
    if args.sweep:
        out["merge_ms"] = {}
        for f in (1,) + merge_factors(geom):
            y = cupy.empty(geom.output_shape, dtype=cops[0][0].dtype)
            with forced_merge(f):  # (calls in the hook are planned afresh: prepare one here)
                call = FORWARD["implicit_gemm"].prepare(geom, cops[0][0], cops[0][1], None, y)
            out["merge_ms"][f] = time_gpu(measure.rotating(
                lambda o, call=call: call((o[0], o[1], None, None), None), cops),
                repeat=max(3, args.repeat // 4))
    if args.backward:
        ours = {"data": lambda o: cupyconv.conv_backward_data(o[2], o[1], x_shape, **kw),
                "weight": lambda o: cupyconv.conv_backward_weight(o[0], o[2], w_shape, **kw)}
        peer = {"data": lambda o: grad.conv2d_input(o[0].shape, o[1], o[2], **opts),
                "weight": lambda o: grad.conv2d_weight(o[0], o[1].shape, o[2], **opts)}
        for pas in ("data", "weight"):
            out["ms"][pas] = time_gpu(measure.rotating(ours[pas], cops), repeat=args.repeat)
            out["cudnn_ms"][pas] = time_gpu(measure.rotating(peer[pas], tops), repeat=args.repeat)
            out["ratio"][pas] = out["cudnn_ms"][pas] / out["ms"][pas]
    measure.set_cudnn_tf32(torch, False)
    return out


def line(r) -> str:
    meth = " ".join(f"{m} {ms * 1e3:.0f}" + (f"/{r['estimate_ms'][m] * 1e3:.0f}e"
                                             if m in r["estimate_ms"] else "")
                    for m, ms in r["ms"].items() if m not in ("data", "weight"))
    s = (f"{r['layer']:10s} {r['row']:8s} auto={r['auto']:14s} merge={r['merge']} "
         f"cuDNN {r['cudnn_ms']['forward'] * 1e3:.0f} us | {meth} us | "
         f"fwd {r['ratio']['forward']:.2f}x err {r['err']:.1e} (cuDNN {r['cudnn_err']:.1e})")
    for pas in ("data", "weight"):
        if pas in r["ratio"]:
            s += (f" | {pas} {r['ms'][pas] * 1e3:.0f}/{r['cudnn_ms'][pas] * 1e3:.0f} us "
                  f"{r['ratio'][pas]:.2f}x")
    if "merge_ms" in r:
        s += " | merges " + " ".join(f"{f}:{ms * 1e3:.0f}" for f, ms in r["merge_ms"].items())
    return s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--only", default="", help="layers whose '<width>@<size>' contains this")
    parser.add_argument("--rows", default="", help="comma-separated row labels (default: all)")
    parser.add_argument("--stride2", action="store_true")
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="time every merge factor")
    parser.add_argument("--direct", action="store_true", help="also time the direct kernel")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    torch = measure.load_torch()
    if torch is None:
        print("exp_grouped needs PyTorch with CUDA (the cuDNN peer)", file=sys.stderr)
        return 2
    facts = measure.device_facts()
    rows = [r for r in ROWS if not args.rows or r[0] in args.rows.split(",")]
    results = []
    for layer in LAYERS + (STRIDE2 if args.stride2 else []):
        if args.only and args.only not in f"{layer[0]}@{layer[1]}":
            continue
        for row in rows:
            r = layer_row(torch, facts["l2_bytes"], layer, row, args)
            results.append(r)
            print(line(r), flush=True)
    summary = {}
    for label, *_ in rows:
        vals = [r["ratio"]["forward"] for r in results if r["row"] == label]
        if vals:
            summary[label] = {"geomean": measure.geomean(vals), "min": min(vals)}
            print(f"{label}: forward geomean {summary[label]['geomean']:.2f}x, "
                  f"min {summary[label]['min']:.2f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {**facts, **measure.torch_facts(torch), "commit": git_commit(), "rows": results,
              "summary": summary}
    (out / f"grouped-{facts['gpu'].replace(' ', '_')}-{result['commit']}.json").write_text(
        json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
