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

import measure  # noqa: E402
from bench_depthwise_nets import our_calls, peer_calls  # noqa: E402
from exp_depthwise_cl import compiled_settings_sweep, depthwise_operands  # noqa: E402
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
    rows = []
    for entry, dtype, geom, nbytes, tensors, arrays in depthwise_operands(torch, dtypes, l2):
        ours = our_calls(entry.layer, geom)["backward-weight"]
        peer = peer_calls(torch, entry.layer)["backward-weight"]
        peer(tensors[0])
        times = {"torch": measure.rotated_graph_ms(peer, tensors, torch_graph_ms, repeat=3,
                                                   target_ms=5.0)}
        for setting in names:
            use(SETTINGS[setting])
            times[setting] = measure.rotated_graph_ms(ours, arrays, measure.cupy_graph_ms,
                                                      repeat=3, target_ms=5.0)
        best = min((k for k in times if k != "torch"), key=times.get)
        rows.append({"layer": entry.label, "dtype": dtype, "bytes": nbytes, "ms": times,
                     "best": best})
        print(f"{entry.label:22s} {dtype:8s} torch {times['torch']:.4f} | "
              + "  ".join(f"{k} {times['torch'] / v:.2f}x{'*' if k == best else ' '}"
                          for k, v in times.items() if k != "torch"), flush=True)
        del tensors, arrays
        measure.release_memory(torch)
    for setting in names:
        for dtype in dtypes:
            ratios = [r["ms"]["torch"] / r["ms"][setting] for r in rows if r["dtype"] == dtype]
            print(f"{setting:14s} {dtype:8s} geomean {measure.geomean(ratios):.2f}x "
                  f"min {min(ratios):.2f}x", flush=True)
    if args.out:
        Path(args.out, "exp-depthwise-wgrad-cl.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
