"""Warps per block of the depthwise plane kernel on small grids (issue 17): device time of the
forward launch at 1, 2 and 4 warps per block (rounds as ``plane_plan`` sets them) on every
MobileNetV2 / EfficientNet-B0 depthwise layer the plane kernel takes (channels-first, batch 32),
with the grid's blocks and its waves of resident blocks, checked against the direct kernel.

    python3 benchmarks/exp_plane_warps.py [--dtypes float32,float16] [--warps 1,2,4]

A block of 4 warps and 1 round takes 64 items; a 7^2 output at stride 2 (576 channels) then makes
576 blocks, under one wave at 26 % occupancy on an H100 (ncu, session 22).
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
from bench_depthwise_nets import BATCH, bench_layers, geometry  # noqa: E402
from cupyconv._core.launch import element_strides  # noqa: E402
from cupyconv._core.timing import time_gpu  # noqa: E402
from cupyconv._core.verify import rel_error  # noqa: E402
from cupyconv._depthwise import launch as dwl  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--warps", default="1,2,4")
    args = ap.parse_args(argv)
    rng = cupy.random.default_rng(0)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    for entry in bench_layers():
        layer = entry.layer
        if entry.family != "depthwise":
            continue
        for dtype in args.dtypes.split(","):
            g = geometry(layer, dtype, "NCHW")
            if dwl.plane_plan(g) is None:
                continue
            x = rng.uniform(-1, 1, g.input_shape, dtype=cupy.float32).astype(dtype)
            w = rng.uniform(-1, 1, g.weight_shape, dtype=cupy.float32).astype(dtype)
            b = rng.uniform(-1, 1, (g.out_channels,), dtype=cupy.float32).astype(dtype)
            y = cupy.empty(g.output_shape, dtype)
            opts = dict(stride=layer.stride, padding=layer.padding, groups=layer.groups)
            ref = cupyconv.conv(x, w, b, method="direct", **opts)
            vec = dwl.vector_rows(x, element_strides(x, False))
            planes = BATCH * g.out_channels
            times = []
            for warps in map(int, args.warps.split(",")):
                plan = dwl.plane_plan(g, True, warps=warps)
                launch = dwl.plane_launch(g, plan, True, vec)
                y.fill(cupy.nan)
                launch(x, w, b, y)
                err = rel_error(y, ref)
                ms = time_gpu(lambda: launch(x, w, b, y), repeat=30)
                blocks = plan.blocks(planes)
                times.append(f"w{warps} r{plan.rounds} {blocks} blk "
                             f"({blocks / sms:.1f}/SM) {ms * 1e3:6.1f} us err {err:.0e}")
            print(f"{entry.label:24s} {dtype:8s} | " + " | ".join(times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
