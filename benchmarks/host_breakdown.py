"""Diagnostic: what one warm call's host time is made of (µs per operation, no synchronize).

    python3 benchmarks/host_breakdown.py

Times the pieces of a prepared call (key, lookup, output allocation, temporaries, stream lookup,
one driver launch) and cProfile's view of whole warm calls of a few operations.
"""

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, n=20000):
    for _ in range(100):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> int:
    import cupy
    import numpy as np
    from cupy.cuda import driver

    import cupyconv as cc
    from cupyconv._dispatch import callcache

    x = cupy.ones((1, 32, 14, 14), cupy.float32)
    w = cupy.ones((32, 32, 3, 3), cupy.float32)
    y = cc.conv(x, w, padding=1)
    key = callcache.call_key("conv", (x, w, None, None), (None, 1, 1, 1, 1, "NCHW", "auto", ""))
    call = callcache.lookup(key)
    prog = call.replay.__self__ if hasattr(call.replay, "__self__") else None
    stream = cupy.cuda.get_current_stream()
    parts = {
        "call_key (4 arrays, 8 options)": lambda: callcache.call_key(
            "conv", (x, w, None, None), (None, 1, 1, 1, 1, "NCHW", "auto", "")),
        "cupy.empty (1,32,14,14)": lambda: cupy.empty((1, 32, 14, 14), cupy.float32),
        "cupy.cuda.alloc(4096)": lambda: cupy.cuda.alloc(4096),
        "get_current_stream().ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "runtime.getDevice()": lambda: cupy.cuda.runtime.getDevice(),
        "x.data.ptr": lambda: x.data.ptr,
        "numpy uint64 item set": (lambda a=np.zeros(4, np.uint64): a.__setitem__(1, 12345678)),
    }
    if prog is not None:
        step = prog.steps[-1]
        ptrs = [x.data.ptr, w.data.ptr, 0, y.data.ptr] + [0] * 8
        parts["driver.launchKernel (conv step)"] = lambda: step.run(ptrs, stream.ptr, driver.launchKernel)
        parts["program.run (all steps)"] = lambda: prog.run((x, w, None, y))
        print(f"program: {len(prog.steps)} steps, temps {prog.temp_bytes}")
    parts["cc.conv warm (3x3 NCHW)"] = lambda: cc.conv(x, w, padding=1)
    xl = cupy.ones((1, 14, 14, 32), cupy.float32)
    wl = cupy.ones((32, 3, 3, 32), cupy.float32)
    parts["cc.conv warm (3x3 NHWC)"] = lambda: cc.conv(xl, wl, padding=1, layout="NHWC")
    w1 = cupy.ones((32, 32, 1, 1), cupy.float32)
    parts["cc.conv warm (1x1 NCHW)"] = lambda: cc.conv(x, w1)
    for name, fn in parts.items():
        us = per_call_us(fn, 2000 if "cc." in name or "program" in name else 20000)
        cupy.cuda.Device().synchronize()
        print(f"{name:40s} {us:7.2f} us")
    for name in ("cc.conv warm (3x3 NCHW)", "cc.conv warm (1x1 NCHW)"):
        prof = cProfile.Profile()
        fn = parts[name]
        prof.enable()
        for _ in range(3000):
            fn()
        prof.disable()
        cupy.cuda.Device().synchronize()
        print(f"\n--- {name}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
