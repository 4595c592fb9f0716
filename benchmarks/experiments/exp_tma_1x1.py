"""1x1 stride-1 NHWC 16-bit convolutions (forward, backward-data, backward-weight), batch 32:
cupyconv's default (the TMA GEMM where ``_gemm/tma_conv.py`` routes) against the same calls with
``CUPYCONV_TMA=0`` (the implicit-GEMM kernels), graph-timed device us, operands not rotated.
Session 28's version timed ``gemm_tma`` directly on the same matrices (its log:
results/experiments/tma-1x1-NVIDIA_H200-92fcaf7.log)."""
import importlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cupy  # noqa: E402

import cupyconv as cc  # noqa: E402
import measure  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402

SHAPES = [(64, 64, 56), (64, 256, 56), (256, 64, 56), (256, 128, 56), (128, 512, 28),
          (512, 128, 28), (256, 1024, 14), (1024, 256, 14), (1024, 512, 14), (512, 2048, 7),
          (2048, 512, 7), (32, 16, 112), (16, 96, 112), (96, 24, 56), (144, 24, 56),
          (192, 768, 28), (768, 192, 28), (40, 240, 28), (240, 40, 28), (384, 96, 56)]


def t(body):
    body()
    return measure.cupy_graph_ms(body, repeat=3, target_ms=3) * 1e3


def main(dtype="bfloat16"):
    tma_conv = importlib.import_module("cupyconv._gemm.tma_conv")
    real = tma_conv.prepare_gemm_tma
    routed = []
    tma_conv.prepare_gemm_tma = lambda *a, **k: (routed.append(k.get("splits", 1)), real(*a, **k))[1]
    print(f"{dtype}, batch 32: us default (TMA where routed, '*') / CUPYCONV_TMA=0", flush=True)
    for cin, cout, hw in SHAPES:
        x = cupy.random.standard_normal((32, hw, hw, cin)).astype(dtype)
        w = cupy.random.standard_normal((cout, 1, 1, cin)).astype(dtype)
        dy = cupy.random.standard_normal((32, hw, hw, cout)).astype(dtype)
        y, dx, dw = cc.conv(x, w, layout="NHWC"), cc.conv_backward_data(dy, w, x.shape, layout="NHWC"), \
            cc.conv_backward_weight(x, dy, w.shape, layout="NHWC")
        calls = {"fwd": lambda: cc.conv(x, w, layout="NHWC", out=y),
                 "data": lambda: cc.conv_backward_data(dy, w, x.shape, layout="NHWC", out=dx),
                 "wgt": lambda: cc.conv_backward_weight(x, dy, w.shape, layout="NHWC", out=dw)}
        row = f"{cin}->{cout} @{hw}:"
        for name, call in calls.items():
            results = []
            for switch in ("1", "0"):
                os.environ["CUPYCONV_TMA"] = switch
                clear_caches()
                routed.clear()
                out = (y, dx, dw)[list(calls).index(name)]
                us = t(call)
                results.append((us, list(routed), out.astype(cupy.float32)))
            (on, r_on, v_on), (off, _, v_off) = results
            err = float(cupy.abs(v_on - v_off).max() / (cupy.abs(v_off).max() + 1e-30))
            mark = f"*{r_on[0]}" if r_on else " "
            row += f"  {name} {on:6.1f}{mark:>4} / {off:6.1f} ({off / on:4.2f}x, diff {err:.1e})"
        os.environ.pop("CUPYCONV_TMA", None)
        print(row, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
