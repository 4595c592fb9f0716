"""Channels-last depthwise row walk: device time of compile-time settings of the forward /
backward-data kernel (depthwise_cl.cu) on every depthwise layer of MobileNetV2 and
EfficientNet-B0 (batch 32, channels-last), beside PyTorch's, so the constants can be set from
measurements (issue 17).  A setting is DWCL_RX (pixels per run), DWCL_MIN_BLOCKS (launch
bounds), MAX_ROUNDS (runs per thread), a divisor of the widest channel vector and MAX_RY
(destination rows per run where H has unit stride).  (The kernel rows' loads unrolled together,
DWCL_UNROLL, were measured at 8960701 and 3f8debe and dropped: benchmarks/notes/depthwise.md,
"Session 16".)

    python3 benchmarks/exp_depthwise_walk.py [--dtypes float32,float16] [--out DIR]

The settings' modules are compiled first in parallel processes (CuPy's disk cache keeps them),
then timed one after another.
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

PASSES = ("forward", "backward-data")
# name -> (DWCL_RX, DWCL_MIN_BLOCKS, DWCL_T2_MIN_BLOCKS, MAX_ROUNDS, VEC_DIV, MAX_RY): VEC_DIV 2
# halves the widest vector of a forward / backward-data launch (twice the threads, each on half
# the channels).
SETTINGS = {
    "ry1 b2": (4, 2, 2, 4, 1, 1),
    "ry2 b2": (4, 2, 2, 4, 1, 2),
    "ry2 b2/3": (4, 2, 3, 4, 1, 2),
    "ry2 b3": (4, 3, 3, 4, 1, 2),
    "ry2 v/2": (4, 2, 3, 4, 2, 2),
    "rx2 b4": (2, 4, 4, 4, 1, 1),
}
DEFAULT_MAX_PASS_VEC = channels_last.max_pass_vec


def use(name: str) -> None:
    rx, min_blocks, t2_min_blocks, rounds, vec_div, ry = SETTINGS[name]
    kernels.KERNEL_CONSTANTS.update(DWCL_RX=rx, DWCL_MIN_BLOCKS=min_blocks,
                                    DWCL_T2_MIN_BLOCKS=t2_min_blocks)
    channels_last.RX = rx
    channels_last.MAX_ROUNDS = rounds
    channels_last.MAX_RY = ry
    channels_last.max_pass_vec = lambda geom: max(1, DEFAULT_MAX_PASS_VEC(geom) // vec_div)
    clear_caches()


def compile_setting(name: str, dtypes: tuple[str, ...]) -> str:
    """Compile the forward/backward-data modules of one setting (run in a child process)."""
    from cupyconv._core import jit

    use(name)
    t0 = time.perf_counter()
    for dtype in dtypes:
        for kf in kernels.DEPTHWISE_CL_KF:
            module = kernels.depthwise_cl_module(dtype, kf)
            variant = module.variants[0]
            jit.get_function(module, "depthwise_cl", dtype, variant)
    return f"{name}: compiled in {time.perf_counter() - t0:.1f} s"


def main(argv=None) -> int:
    args, dtypes, names, torch, torch_graph_ms, l2 = compiled_settings_sweep(
        __doc__, SETTINGS, compile_setting, argv)
    rows = time_settings(torch, torch_graph_ms, depthwise_operands(torch, dtypes, l2), PASSES,
                         names, use)
    use(names[0])
    print_geomeans(rows, PASSES, names, dtypes)
    if args.out:
        Path(args.out, "exp-depthwise-walk.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
