"""Channels-first depthwise on the plane row walk (depthwise_plane.cu) where it is new in session
19: device time on the depthwise layers of MobileNetV2 and EfficientNet-B0 (batch 32, NCHW),
beside PyTorch's (cuDNN autotuned), so the choices can be set from measurements (issue 17).

"tile" is the kernels these passes ran on before (the tile kernels), "default" the plane kernel.
--mode s2 (default): the forward and backward-weight passes of the stride-2 layers, the plane
  kernels (S = 2) also at other register budgets ("bN": DP_MIN_BLOCKS and DP_WGRAD_MIN_BLOCKS N,
  resident blocks per SM the launch bounds cut registers for).
--mode dgrad: backward-data of the unit-stride layers (the forward plane kernel on the flipped
  filter: launch.backward_data_twin).
--mode wgrad5: backward-weight of the unit-stride 5x5 layers.

    python3 benchmarks/exp_depthwise_plane.py [--mode s2|dgrad|wgrad5] [--dtypes ...] [--out DIR]
"""

from __future__ import annotations

import dataclasses
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
from cupyconv._depthwise import launch  # noqa: E402

# mode -> (passes, which layers)
MODES = {"s2": (("forward", "backward-weight"), lambda layer: layer.stride == 2),
         "dgrad": (("backward-data",), lambda layer: layer.stride == 1),
         "wgrad5": (("backward-weight",), lambda layer: layer.stride == 1 and layer.kernel == 5)}
MODE = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "s2"
# name -> blocks per SM for the float and 16-bit stride-2 kernels (None: the plane kernels off,
# the tile kernels; "default": the source's budgets)
SETTINGS = ({"tile": None, "default": "default", "b4": 4, "b3": 3, "b2": 2} if MODE == "s2"
            else {"tile": None, "default": "default"})

_PLANE_PLAN, _PLANE_WGRAD_PLAN = launch.plane_plan, launch.plane_wgrad_plan
_TWIN = launch.backward_data_twin
_STRIDE2_MODULE = kernels.depthwise_plane_stride2_module


def _stride2_module(budget):
    def module(dtype, kf, wgrad=False):
        m = _STRIDE2_MODULE(dtype, kf, wgrad)
        if budget == "default":
            return m
        defines = (("DP_MIN_BLOCKS(T, KWB, S)", f"(sizeof(T) > 4 ? 2 : {budget})"),
                   ("DP_WGRAD_MIN_BLOCKS(T, KWB, KF, S)", f"(sizeof(T) > 4 ? 2 : {budget})"))
        return dataclasses.replace(m, defines=defines)
    return module


def _before(plan, kernels=None):
    """``plan`` where the plane kernel ran before session 19: unit stride (and ``kernels``)."""
    def old(geom, *a, **k):
        if geom.stride != (1, 1) or (kernels and geom.kernel not in kernels):
            return None
        return plan(geom, *a, **k)
    return old


def use(name: str) -> None:
    budget = SETTINGS[name]
    launch.plane_plan = _before(_PLANE_PLAN) if budget is None else _PLANE_PLAN
    launch.plane_wgrad_plan = (_before(_PLANE_WGRAD_PLAN, ((3, 3),)) if budget is None
                               else _PLANE_WGRAD_PLAN)
    launch.depthwise_plane_stride2_module = _stride2_module(budget or "default")
    launch.backward_data_twin = (lambda geom: None) if budget is None else _TWIN
    clear_caches()


def compile_setting(name: str, dtypes: tuple[str, ...]) -> str:
    """Compile the stride-2 plane modules of one setting (run in a child process; the other
    modes time stride-1 modules, which the first timed call compiles)."""
    from cupyconv._core import jit

    use(name)
    t0 = time.perf_counter()
    if SETTINGS[name] is not None and MODE == "s2":
        for dtype in dtypes:
            for wgrad, kfs in ((False, kernels.PLANE_STRIDE2_KF),
                               (True, kernels.PLANE_STRIDE2_WGRAD_KF)):
                for kf in kfs:
                    module = launch.depthwise_plane_stride2_module(dtype, kf, wgrad)
                    template = module.templates[0]
                    for variant in module.variants:
                        jit.get_function(module, template, dtype, variant)
    return f"{name}: compiled in {time.perf_counter() - t0:.1f} s"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--mode" in argv:
        i = argv.index("--mode")
        argv = argv[:i] + argv[i + 2:]
    args, dtypes, names, torch, torch_graph_ms, l2 = compiled_settings_sweep(
        __doc__, SETTINGS, compile_setting, argv)
    passes, keep = MODES[MODE]
    operands = depthwise_operands(torch, dtypes, l2, "NCHW", keep=keep)
    rows = time_settings(torch, torch_graph_ms, operands, passes, names, use)
    use("default")
    print_geomeans(rows, passes, names, dtypes)
    if args.out:
        Path(args.out, f"exp-depthwise-plane-{MODE}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
