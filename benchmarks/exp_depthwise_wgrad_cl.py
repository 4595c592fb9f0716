"""Channels-last depthwise backward-weight: device time of its grid and register settings
(depthwise_cl.cu's depthwise_cl_wgrad, then chunk_sum) on every depthwise layer of MobileNetV2
and EfficientNet-B0 (batch 32, channels-last), beside PyTorch's, so the constants can be set
from measurements (issue 17).  A setting is DWCL_WGRAD_MIN_BLOCKS (launch bounds: resident
blocks per SM, which caps the registers), WGRAD_WAVES (waves of resident blocks the chunks
fill), WGRAD_MIN_RUNS (least runs per thread), DWCL_WGRAD_UNROLL (runs unrolled together) and
DWCL_ACC (accumulators per thread: taps per pass at a vector width).
"old" is the plan before session 18 (528 blocks on any device, at least four runs per thread).

    python3 benchmarks/exp_depthwise_wgrad_cl.py [--dtypes float32,float16] [--out DIR]
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
from cupyconv._depthwise import channels_last  # noqa: E402

# name -> (DWCL_WGRAD_MIN_BLOCKS, WGRAD_WAVES, WGRAD_MIN_RUNS, DWCL_WGRAD_UNROLL, DWCL_ACC)
SETTINGS = {
    "old b2 w2 r4": (2, 2, 4, 1, 36),
    "b2 w1": (2, 1, 1, 1, 36),
    "b2 w1 u2": (2, 1, 1, 2, 36),
    "b2 w2": (2, 2, 1, 1, 36),
    "b3 w1": (3, 1, 1, 1, 36),
    "b2 w1 acc40": (2, 1, 1, 1, 40),
    "b2 w1 acc60": (2, 1, 1, 1, 60),
    "b1 w1 acc60": (1, 1, 1, 1, 60),
}


def use(setting) -> None:
    min_blocks, waves, min_runs, unroll, acc = setting
    kernels.KERNEL_CONSTANTS.update(DWCL_WGRAD_MIN_BLOCKS=min_blocks, DWCL_WGRAD_UNROLL=unroll,
                                    DWCL_ACC=acc)
    channels_last.WGRAD_MIN_BLOCKS = min_blocks
    channels_last.WGRAD_WAVES = waves
    channels_last.WGRAD_MIN_RUNS = min_runs
    channels_last.WGRAD_ACC = acc
    clear_caches()

def compile_setting(name: str, dtypes: tuple[str, ...]) -> str:
    """Compile the backward-weight modules of one setting (run in a child process)."""
    from cupyconv._core import jit

    use(SETTINGS[name])
    t0 = time.perf_counter()
    for dtype in dtypes:
        for kf in kernels.DEPTHWISE_CL_KF:
            module = kernels.depthwise_cl_wgrad_module(dtype, kf)
            for variant in module.variants:
                jit.get_function(module, "depthwise_cl_wgrad", dtype, variant)
    return f"{name}: compiled in {time.perf_counter() - t0:.1f} s"


def main(argv=None) -> int:
    args, dtypes, names, torch, torch_graph_ms, l2 = compiled_settings_sweep(
        __doc__, SETTINGS, compile_setting, argv)
    passes = ("backward-weight",)
    rows = time_settings(torch, torch_graph_ms, depthwise_operands(torch, dtypes, l2), passes,
                         names, lambda name: use(SETTINGS[name]))
    print_geomeans(rows, passes, names, dtypes)
    if args.out:
        Path(args.out, "exp-depthwise-wgrad-cl.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
