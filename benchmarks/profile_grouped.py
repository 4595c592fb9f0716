"""Where a grouped (ResNeXt) layer's time goes: the whole call against the sum of its kernels.

    python3 benchmarks/profile_grouped.py [--layers 1024@7,256@56s2] [--dtype float16]
                                          [--layout NHWC] [--factors auto,1,2,4] [--passes forward]
    ncu --profile-from-start off --csv --metrics gpu__time_duration.sum \\
        python3 benchmarks/profile_grouped.py --kernels

Without ``--kernels``: device time of each call (ours for each merge factor, ``auto`` being the
cost model's, and PyTorch's cuDNN autotuned) replayed as a CUDA graph, operands not rotated.
With ``--kernels``: each call once between cudaProfilerStart/Stop, after a line ``CALL <layer>
<pass> <who>``, for ncu to time its kernels one by one (the launch gaps a graph still pays are
the difference).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from cupyconv._gemm.grouped import forced_merge, merge_factors  # noqa: E402
from cupyconv._core.geometry import ConvGeometry  # noqa: E402

GROUPS, BATCH = 32, 32
LAYERS = "128@56,256@28,512@14,1024@7,256@56s2,512@28s2,1024@14s2"


def parse_layer(text: str) -> tuple[int, int, int]:
    """'<width>@<size>[s2]' -> (width, size, stride)."""
    width, rest = text.split("@")
    size, _, stride = rest.partition("s")
    return int(width), int(size), int(stride or 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=LAYERS)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--layout", default="NHWC")
    ap.add_argument("--factors", default="auto,1", help="merge factors ('auto': the cost model's)")
    ap.add_argument("--passes", default="forward", help="forward,backward-data,backward-weight")
    ap.add_argument("--kernels", action="store_true", help="one call each, for ncu")
    ap.add_argument("--plans", action="store_true",
                    help="also time ours under every GEMM tile with split-K 1-3 (forced_plan)")
    args = ap.parse_args(argv)
    import cupy
    torch = measure.load_torch()
    torch.backends.cudnn.benchmark = True
    nhwc = args.layout == "NHWC"
    for text in args.layers.split(","):
        c, size, s = parse_layer(text)
        shapes = ((BATCH, c, size, size), (c, c // GROUPS, 3, 3),
                  (BATCH, c, -(-size // s), -(-size // s)))
        (ops,) = measure.torch_operand_copies(torch, shapes, args.dtype, nhwc, 1, seed=c + s)
        arrays = tuple(measure.cupy_view(t, nhwc) for t in ops)
        geom = ConvGeometry.from_shapes(arrays[0].shape, arrays[1].shape, stride=s, padding=1,
                                        groups=GROUPS, layout=args.layout, dtype=args.dtype)
        opts = dict(stride=s, padding=1, groups=GROUPS, layout=args.layout)
        ours = {"forward": lambda a: cupyconv.conv(a[0], a[1], **opts),
                "backward-data": lambda a: cupyconv.conv_backward_data(a[2], a[1],
                                                                       geom.input_shape, **opts),
                "backward-weight": lambda a: cupyconv.conv_backward_weight(a[0], a[2],
                                                                           geom.weight_shape,
                                                                           **opts)}
        conv_backward = torch.ops.aten.convolution_backward
        sp = ([s, s], [1, 1], [1, 1])
        peer = {"forward": lambda t: torch.nn.functional.conv2d(t[0], t[1], None, s, 1, 1, GROUPS),
                "backward-data": lambda t: conv_backward(t[2], t[0], t[1], None, *sp, False,
                                                         [0, 0], GROUPS, [True, False, False])[0],
                "backward-weight": lambda t: conv_backward(t[2], t[0], t[1], None, *sp, False,
                                                           [0, 0], GROUPS,
                                                           [False, True, False])[1]}
        for name in args.passes.split(","):
            factors = [f for f in args.factors.split(",")
                       if f == "auto" or int(f) == 1 or int(f) in merge_factors(geom)]
            calls = [(f"ours F={f}", ours[name], arrays, f) for f in factors]
            calls.append(("cudnn", peer[name], ops, None))
            for who, fn, a, f in calls:
                hook = forced_merge(None if f in (None, "auto") else int(f))
                with hook:
                    fn(a)  # compile, prepare, autotune
                    measure.synchronize()
                    label = f"{text} {name} {who}"
                    if args.kernels:
                        print(f"CALL {label}", flush=True)
                        cupy.cuda.runtime.profilerStart()
                        fn(a)
                        measure.synchronize()
                        cupy.cuda.runtime.profilerStop()
                    elif who == "cudnn":
                        ms = measure.torch_graph_ms(torch, lambda: fn(a))
                        print(f"{label:40s} {ms * 1e3:8.1f} us", flush=True)
                    else:
                        ms = measure.cupy_graph_ms(lambda: fn(a))
                        print(f"{label:40s} {ms * 1e3:8.1f} us", flush=True)
                        if args.plans:
                            print("    " + _plan_times(fn, a, geom.dtype), flush=True)
    return 0


def _plan_times(fn, a, dtype: str) -> str:
    """Graph time of ``fn(a)`` with every tile of its GEMM's main loop and split-K 1-3 forced."""
    from cupyconv._core.kernels import gemm_tiles
    from cupyconv._gemm import launch

    with launch.record_plans() as log:
        fn(a)
    if not log:
        return "(no GEMM launch)"
    kernel, shape, plan = log[-1]
    math_kind = plan.math
    out = [f"{kernel} {shape} planned {plan.tile[0]}x{plan.tile[1]}/{plan.splits} "
           f"({plan.blocks} per SM) |"]
    for tile in gemm_tiles(dtype, math_kind):
        for splits in (1, 2, 3):
            with launch.forced_plan(launch.GemmPlan(tile, splits, 0.0, math_kind)):
                try:
                    fn(a)
                    ms = measure.cupy_graph_ms(lambda: fn(a))
                except Exception as e:  # (a split the launch grid cannot take)
                    out.append(f"{tile[0]}x{tile[1]}/{splits}: {type(e).__name__}")
                    continue
            out.append(f"{tile[0]}x{tile[1]}/{splits} {ms * 1e3:.1f}")
    return " ".join(out)


if __name__ == "__main__":
    sys.exit(main())
