"""Channels-last depthwise row walk: device time of compile-time settings of the forward /
backward-data kernel (depthwise_cl.cu) on every depthwise layer of MobileNetV2 and
EfficientNet-B0 (batch 32, channels-last), beside PyTorch's, so the constants can be set from
measurements (issue 17).  A setting is DWCL_RX (pixels per run), DWCL_MIN_BLOCKS (launch
bounds), MAX_ROUNDS (runs per thread) and a divisor of the widest channel vector.  (The kernel
rows' loads unrolled together, DWCL_UNROLL, were measured at 8960701 and 3f8debe and dropped:
benchmarks/NOTES.md, session 16.)
Backward-weight is timed once (it takes none of these settings).

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

import measure  # noqa: E402
from bench_depthwise_nets import our_calls, peer_calls  # noqa: E402
from exp_depthwise_cl import compiled_settings_sweep, depthwise_operands  # noqa: E402
from cupyconv._core import kernels  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._depthwise import channels_last  # noqa: E402

# name -> (DWCL_RX, DWCL_MIN_BLOCKS, MAX_ROUNDS, VEC_DIV): VEC_DIV 2 halves the widest vector
# of a forward / backward-data launch (twice the threads, each on half the channels).
SETTINGS = {
    "rx4 b2 r4": (4, 2, 4, 1),
    "rx2 b2 r4": (2, 2, 4, 1),
    "rx2 b4 r4": (2, 4, 4, 1),
    "rx2 b3 r4": (2, 3, 4, 1),
    "rx4 b2 r4 v/2": (4, 2, 4, 2),
    "rx2 b4 r4 v/2": (2, 4, 4, 2),
}
DEFAULT_MAX_PASS_VEC = channels_last.max_pass_vec


def use(setting) -> None:
    rx, min_blocks, rounds, vec_div = setting
    kernels.KERNEL_CONSTANTS.update(DWCL_RX=rx, DWCL_MIN_BLOCKS=min_blocks)
    channels_last.RX = rx
    channels_last.MAX_ROUNDS = rounds
    channels_last.max_pass_vec = lambda geom: max(1, DEFAULT_MAX_PASS_VEC(geom) // vec_div)
    clear_caches()


def compile_setting(name: str, dtypes: tuple[str, ...]) -> str:
    """Compile the forward/backward-data modules of one setting (run in a child process)."""
    from cupyconv._core import jit

    use(SETTINGS[name])
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
    rows = []
    for entry, dtype, geom, nbytes, tensors, arrays in depthwise_operands(torch, dtypes, l2):
        layer = entry.layer
        ours, peer = our_calls(layer, geom), peer_calls(torch, layer)
        for name in ("forward", "backward-data", "backward-weight"):
            peer[name](tensors[0])
            times = {"torch": measure.rotated_graph_ms(peer[name], tensors, torch_graph_ms,
                                                       repeat=3, target_ms=5.0)}
            for setting in (names if name != "backward-weight" else names[:1]):
                use(SETTINGS[setting])
                times[setting] = measure.rotated_graph_ms(
                    ours[name], arrays, measure.cupy_graph_ms, repeat=3, target_ms=5.0)
            best = min((k for k in times if k != "torch"), key=times.get)
            rows.append({"layer": entry.label, "dtype": dtype, "pass": name,
                         "bytes": nbytes, "ms": times, "best": best})
            print(f"{entry.label:22s} {dtype:8s} {name:15s} torch {times['torch']:.4f} | "
                  + "  ".join(f"{k} {times['torch'] / v:.2f}x{'*' if k == best else ' '}"
                              for k, v in times.items() if k != "torch"), flush=True)
        del tensors, arrays  # (the generator drops its own references at the next layer)
        measure.release_memory(torch)
    if args.out:
        Path(args.out, "exp-depthwise-walk.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
