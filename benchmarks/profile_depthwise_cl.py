"""Depthwise (channels-last by default) under ncu: one call of each pass of ours and PyTorch's on a few
MobileNetV2 / EfficientNet-B0 layers (batch 32), between cudaProfilerStart/Stop so that ncu
profiles only those launches (run it with ``--profile-from-start off``).

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --csv \
        python3 benchmarks/profile_depthwise_cl.py [--dtypes float32,float16] [--layers ...]

Without ncu it prints each call's order, so the profile's rows can be matched to calls.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402

import measure  # noqa: E402
from bench_depthwise_nets import (BATCH, PASSES, bench_layers, geometry, our_calls,  # noqa: E402
                                  peer_calls)

LAYERS = ("dw 3x3 s1 144ch 56^2", "dw 3x3 s2 96ch 112^2", "dw 5x5 s1 672ch 14^2",
          "dw 3x3 s1 960ch 7^2")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--passes", default=",".join(PASSES))
    ap.add_argument("--layouts", default="NHWC", help="NHWC, NCHW or both")
    args = ap.parse_args(argv)
    torch = measure.load_torch()
    torch.backends.cudnn.benchmark = True
    wanted = args.layers.split(",")
    calls = []
    for entry in [e for e in bench_layers() if e.label in wanted]:
        layer = entry.layer
        for dtype, layout in itertools.product(args.dtypes.split(","), args.layouts.split(",")):
            nhwc = layout == "NHWC"
            geom = geometry(layer, dtype, layout)
            shapes = (layer.input_shape(BATCH), layer.weight_shape(), layer.output_shape(BATCH))
            tensors = measure.torch_operand_copies(torch, shapes, dtype, nhwc, 1,
                                                   seed=zlib.crc32(entry.label.encode()))[0]
            arrays = tuple(measure.cupy_view(t, nhwc) for t in tensors)
            ours, peer = our_calls(layer, geom), peer_calls(torch, layer)
            for name in args.passes.split(","):
                for who, fn, ops in (("ours", ours[name], arrays), ("torch", peer[name], tensors)):
                    for _ in range(3):  # compile, autotune
                        fn(ops)
                    calls.append((f"{entry.label} {dtype} {layout} {name} {who}", fn, ops))
    torch.cuda.synchronize()
    cupy.cuda.runtime.deviceSynchronize()
    cupy.cuda.runtime.profilerStart()
    for label, fn, ops in calls:
        print(f"CALL {label}", flush=True)
        fn(ops)
        cupy.cuda.runtime.deviceSynchronize()
    cupy.cuda.runtime.profilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
