"""Does the GEMM planner (``launch.plan_gemm``) pick the fastest tile and split-K factor for
convolutions on the tensor-core loops?  Times the default plan of each problem against every
tile of its main loop with split-K factors 1..8 (``launch.forced_plan``), with cuDNN at the same
precision and layout for scale (ours as CUDA-graph replays: device time), and prints the
planner's estimate beside each measurement.

    python3 benchmarks/exp_conv_plans.py [--repeat 10] [--precision fp16,tf32] [--pass forward]
        [--short-k N] [--splits 1,2,3,4,6,8]

Problems: bench_precision's ResNet-50 layers (batch 32, which the planner's rates were read
from) and held-out ones the model was not fitted on: batch 8 and batch 1 deep layers, VGG-16's
14x14 3x3, a 1x1 on 7x7 maps, a 3x3 stride 2.  Channels-last throughout.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import measure  # noqa: E402
from bench import SUITE  # noqa: E402
from bench_precision import pass_calls  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._core.kernels import gemm_tiles  # noqa: E402
from cupyconv._gemm import launch  # noqa: E402
from measure import time_gpu  # noqa: E402

PRECISIONS = (("fp16", "float16", "exact"), ("bf16", "bfloat16", "exact"),
              ("tf32", "float32", "tf32"))
# name: (n, c, h, w, k, r, stride, padding)
PROBLEMS = {name: SUITE[name][:8] for name in (
    "res2 3x3 64", "res2 1x1 64->256", "res3 3x3 128", "res4 3x3 256", "res5 3x3 512",
    "downsample 1x1 s2")}
PROBLEMS.update({
    "res4 3x3 256 b8": (8, 256, 14, 14, 256, 3, 1, 1),
    "res5 3x3 512 b8": (8, 512, 7, 7, 512, 3, 1, 1),
    "res5 3x3 512 b1": (1, 512, 7, 7, 512, 3, 1, 1),
    "vgg 3x3 512 14^2 b16": (16, 512, 14, 14, 512, 3, 1, 1),
    "1x1 2048->512 7^2 b32": (32, 2048, 7, 7, 512, 1, 1, 0),
    "3x3 s2 128 56^2 b32": (32, 128, 56, 56, 128, 3, 2, 1),
})
SPLITS = (1, 2, 3, 4, 6, 8)


def device_ms(call, cops, repeat: int) -> float:
    """Device ms per call, replayed as a CUDA graph over the rotated operands: calls under a
    forced plan plan afresh each time (no prepared-call cache), so eager timing would measure
    their Python instead."""
    return measure.rotated_graph_ms(lambda o: call(*o), cops, measure.cupy_graph_ms,
                                    repeat=repeat)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--precision", default="fp16,tf32")
    ap.add_argument("--pass", dest="passes", default="forward", help="forward,data,weight")
    ap.add_argument("--short-k", type=int, default=None,
                    help="launch.WGMMA_SHORT_K for this run (0: one-block builds only, "
                         "1000: two-block builds only)")
    ap.add_argument("--splits", default=",".join(map(str, SPLITS)))
    args = ap.parse_args(argv)
    if args.short_k is not None:
        launch.WGMMA_SHORT_K = args.short_k
    splits_tried = [int(v) for v in args.splits.split(",")]
    labels = args.precision.split(",")
    passes = args.passes.split(",")
    torch = measure.load_torch()
    torch.backends.cudnn.benchmark = True
    l2 = measure.device_facts()["l2_bytes"]
    for name, (n, c, h, w, k, r, s, p) in PROBLEMS.items():
        opts = dict(stride=s, padding=p)
        for label, dtype, precision in PRECISIONS:
            if label not in labels:
                continue
            oh = (h + 2 * p - r) // s + 1
            shapes = ((n, c, h, w), (k, c, r, r), (n, k, oh, oh))
            item = 2 if dtype != "float32" else 4
            copies = measure.rotation_copies(l2, sum(math.prod(t) for t in shapes) * item)
            tops = measure.torch_operand_copies(torch, shapes, dtype, True, copies)
            cops = [tuple(measure.cupy_view(t, True) for t in trip) for trip in tops]
            ours, peer = pass_calls(torch, opts, "NHWC", precision, cops[0][0].shape,
                                    cops[0][1].shape)
            for pas in passes:
                call = ours[pas]
                measure.set_cudnn_tf32(torch, precision == "tf32")
                ref = time_gpu(measure.rotating(lambda o, f=peer[pas]: f(*o), tops),
                               repeat=args.repeat)
                measure.set_cudnn_tf32(torch, False)
                clear_caches()
                with launch.record_plans() as log:
                    call(*cops[0])
                default = device_ms(call, cops, args.repeat)
                launches = [(kern, shape, pl) for kern, shape, pl in log]
                print(f"{name:24s} {label:5s} {pas:7s} cuDNN {ref:.4f} default {default:.4f} "
                      f"({ref / default:.2f}x) launches " + "; ".join(
                          f"{kern} {shape} tile {pl.tile[:2]} splits {pl.splits} blocks "
                          f"{pl.blocks} est {pl.seconds * 1e3:.4f}" for kern, shape, pl in launches),
                      flush=True)
                if not launches:
                    continue
                math_kind = launches[0][2].math
                results = []
                for tile in gemm_tiles(dtype, math_kind):
                    for splits in splits_tried:
                        plan = launch.GemmPlan(tile, splits, 0.0, math_kind)
                        clear_caches()
                        try:
                            with launch.forced_plan(plan):
                                t = device_ms(call, cops, args.repeat)
                        except Exception as exc:  # noqa: BLE001 - a plan the launch refuses
                            print(f"    tile {tile[:2]} splits {splits}: {type(exc).__name__} {exc}")
                            continue
                        m, nn, kk, batch = launches[-1][1]
                        slots = launch.sm_count(0)
                        est = launch._plan_time(tile, splits, m, nn, kk, batch, slots, 4,
                                                launch.MATH_RATE[math_kind])
                        results.append((t, tile[:2], splits, est))
                results.sort()
                for t, tile, splits, est in results[:6]:
                    print(f"    tile {tile} splits {splits}: {t:.4f} ms ({ref / t:.2f}x) "
                          f"model {est * 1e3:.4f}", flush=True)
                best = results[0]
                print(f"  best {best[1]} x{best[2]} {best[0]:.4f} vs default {default:.4f}: "
                      f"{default / best[0]:.2f}x to gain", flush=True)
            del tops, cops
            measure.release_memory(torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
