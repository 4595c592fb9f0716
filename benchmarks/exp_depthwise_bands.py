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

import measure  # noqa: E402
from bench_depthwise_nets import our_calls, peer_calls  # noqa: E402
from exp_depthwise_cl import compiled_settings_sweep, depthwise_operands  # noqa: E402
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
    rows = []
    for entry, dtype, geom, nbytes, tensors, arrays in depthwise_operands(
            torch, dtypes, l2, "NCHW", keep=lambda layer: True):
        for name in PASSES:
            ours = our_calls(entry.layer, geom)[name]
            peer = peer_calls(torch, entry.layer)[name]
            peer(tensors[0])
            times = {"torch": measure.rotated_graph_ms(peer, tensors, torch_graph_ms, repeat=3,
                                                       target_ms=5.0)}
            for setting in names:
                use(setting)
                times[setting] = measure.rotated_graph_ms(ours, arrays, measure.cupy_graph_ms,
                                                          repeat=3, target_ms=5.0)
            best = min((k for k in times if k != "torch"), key=times.get)
            rows.append({"layer": entry.label, "dtype": dtype, "pass": name, "bytes": nbytes,
                         "ms": times, "best": best})
            print(f"{entry.label:22s} {dtype:8s} {name:14s} torch {times['torch']:.4f} "
                  f"({nbytes / times['torch'] / 1e9:.0f} GB/s) | "
                  + "  ".join(f"{k} {times['torch'] / v:.2f}x{'*' if k == best else ' '}"
                              for k, v in times.items() if k != "torch"), flush=True)
        del tensors, arrays
        measure.release_memory(torch)
    use("bands")
    bands.prefer_bands = _PREFER
    for name in PASSES:
        for setting in names:
            for dtype in dtypes:
                ratios = [r["ms"]["torch"] / r["ms"][setting] for r in rows
                          if r["dtype"] == dtype and r["pass"] == name]
                print(f"{name:14s} {setting:8s} {dtype:8s} geomean "
                      f"{measure.geomean(ratios):.2f}x min {min(ratios):.2f}x", flush=True)
    if args.out:
        Path(args.out, "exp-depthwise-bands.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
