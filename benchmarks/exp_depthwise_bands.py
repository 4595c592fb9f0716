"""Channels-first depthwise on the band kernel (depthwise_bands.cu, session 20) against the routes
it may replace: device time of the forward and backward-data passes of the depthwise layers of
MobileNetV2 and EfficientNet-B0 (batch 32, NCHW), beside PyTorch's (cuDNN autotuned), so that
``bands.prefer_bands`` and the plan's targets can be set from measurements (issue 17).

Settings: "before", the band kernel never preferred (the plane row walk, the tile kernels, strided
backward-data through channels-last copies); "bands" (the default plan), the band kernel wherever
it applies; "i2": 2 items per thread; "s24": a 24 KB shared-memory target; "b6", "b8": the kernel
compiled for 6 or 8 resident blocks per SM (DWB_MIN_BLOCKS: 40 or 32 registers) with a
shared-memory target that lets them all be resident (36, 27 KB), "b8s16": 8 at 16 KB.

    python3 benchmarks/exp_depthwise_bands.py [--dtypes float32,float16] [--out DIR]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from exp_depthwise_cl import (compiled_settings_sweep, depthwise_operands,  # noqa: E402
                              print_geomeans, time_settings)
from cupyconv._core import kernels  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._depthwise import bands  # noqa: E402

PASSES = ("forward", "backward-data")
# name -> (band plan keywords (None: the band kernel off), DWB_MIN_BLOCKS)
MIN_BLOCKS = kernels.KERNEL_CONSTANTS["DWB_MIN_BLOCKS"]
SETTINGS = {"before": (None, MIN_BLOCKS), "bands": ({}, MIN_BLOCKS),
            "i2": ({"items_per_thread": 2}, MIN_BLOCKS),
            "s24": ({"smem_target": 24 * 1024}, MIN_BLOCKS),
            "b6": ({"smem_target": 36 * 1024}, 6), "b8": ({"smem_target": 27 * 1024}, 8),
            "b8s16": ({"smem_target": 16 * 1024}, 8)}

_PREFER, _PLAN = bands.prefer_bands, bands.band_plan


def use(name: str) -> None:
    options, min_blocks = SETTINGS[name]
    kernels.KERNEL_CONSTANTS["DWB_MIN_BLOCKS"] = min_blocks  # (a new binary: clear_caches below)
    if options is None:
        bands.prefer_bands = lambda geom, transposed: False
        bands.band_plan = _PLAN
    else:
        bands.prefer_bands = lambda geom, transposed: True
        bands.band_plan = lambda geom, transposed: _PLAN(geom, transposed, **options)
    clear_caches()


def compile_setting(name: str, dtypes: tuple[str, ...]) -> str:
    """Compile the band modules of one register budget (run in a child process so that CuPy's
    disk cache has them before the timed calls)."""
    from cupyconv._core import jit

    use(name)
    t0 = time.perf_counter()
    if SETTINGS[name][0] is not None:
        for dtype in dtypes:
            for kf in kernels.DEPTHWISE_BANDS_KF[:2]:
                module = kernels.depthwise_bands_module(dtype, kf)
                for variant in module.variants:
                    jit.get_function(module, module.templates[0], dtype, variant)
    return f"{name}: compiled in {time.perf_counter() - t0:.1f} s"


def main(argv=None) -> int:
    args, dtypes, names, torch, torch_graph_ms, l2 = compiled_settings_sweep(
        __doc__, SETTINGS, compile_setting, argv)
    operands = depthwise_operands(torch, dtypes, l2, "NCHW", keep=lambda layer: True)
    rows = time_settings(torch, torch_graph_ms, operands, PASSES, names, use)
    use("bands")
    bands.prefer_bands = _PREFER
    print_geomeans(rows, PASSES, names, dtypes)
    if args.out:
        Path(args.out, "exp-depthwise-bands.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
