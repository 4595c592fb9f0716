"""bf16 NHWC backward-weight, ResNet-50/EffNet shapes, batch 32: auto plan vs forced tiles."""
import numpy as np, cupy, cupyconv as cc
from cupyconv._gemm.launch import forced_plan, record_plans
from cupyconv._gemm.plans import GemmPlan
from cupyconv._core.kernels import MATH_WGMMA

import sys; sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import measure
def t(fn, plan=None):
    def body():
        with forced_plan(plan):
            return fn()
    body()
    return measure.cupy_graph_ms(body, repeat=3, target_ms=3) * 1e3

shapes = [(1024, 512, 14, 1, 1), (512, 1024, 28, 1, 2), (64, 64, 56, 3, 1), (64, 64, 56, 1, 1),
          (256, 64, 56, 1, 1), (32, 16, 112, 1, 1), (16, 96, 112, 1, 1), (24, 144, 56, 1, 1), (512, 512, 7, 3, 1)]
for dt in ("bfloat16", "float16"):
    print(dt, flush=True)
    for cin, cout, hw, k, s in shapes:
        x = cupy.random.standard_normal((32, hw, hw, cin)).astype(dt)
        oh = (hw + 2 * (k // 2) - k) // s + 1
        dy = cupy.random.standard_normal((32, oh, oh, cout)).astype(dt)
        ws = (cout, k, k, cin)
        call = lambda: cc.conv_backward_weight(x, dy, ws, stride=s, padding=k // 2, layout="NHWC")
        with record_plans() as log:
            call()
        row = [f"{cin}->{cout} {k}x{k} s{s} @{hw}: auto {t(call):8.1f} us {[(p.tile[:2], p.splits) for _, _, p in log]}"]
        for tile in ((64, 64, 64, 4, 4), (128, 64, 64, 8, 4), (128, 128, 64, 8, 8)):
            best = None
            for sp in (1, 2, 4, 8, 16, 32, 64):
                us = t(call, GemmPlan(tile, sp, 0.0, MATH_WGMMA))
                if best is None or us < best[0]: best = (us, sp)
            row.append(f"{tile[:2]} best {best[0]:.1f} us (splits {best[1]})")
        print(" | ".join(row), flush=True)
