"""Issue 46: how many split-K parts pay on the TMA kernel's backward-weight GEMMs, against what
``_gemm/tma_splits.py`` estimates.

For each problem, device time of the prepared launch (split-K reduction included) for a range
of parts, by CUDA-graph replays over operand copies (``measure.device_times``), beside the
parts ``tma_splits`` picks and its estimate of each:
  * 1x1 backward-weight, dw[K, C] = dy[P, K]^T @ x[P, C] (``tma.prepare_gemm_tma`` with
    CONV_TILE, and the wide 128 x 256 tile unsplit for reference);
  * 3x3 backward-weight through the im2col mode (``tma_conv.prepare_im2col_weight``, parts
    forced through ``tma_conv.weight_splits``).
The session-33 run (the problems below, bf16, batch 32, H200: notes/gemm.md, "Session 33,
issue 46: split-K charged for its reduction") is what the estimate's constants were fitted on;
rerun it after the reduction or the kernel changes, and on problems it was not fitted on
(``--batch``).

    PYTHONPATH=. python3 benchmarks/experiments/exp_split_k.py [--dtype bfloat16] [--batch 32]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measure  # noqa: E402

PARTS = (1, 2, 3, 4, 6, 8, 12, 16, 26)
# 1x1 layers at batch 32: (pixels per image, K, C)
POINTWISE = [(49, 2048, 512), (49, 512, 2048), (196, 512, 1024), (49, 320, 1280),
             (49, 1280, 320)]
# 3x3 layers: (C = K, H = W)
IM2COL = [(512, 7), (256, 14), (64, 56), (128, 28)]


def _timed(launches, ops) -> float:
    """Device us per call of the launch prepared for each operand copy in ``ops``."""
    index = {id(o[0]): i for i, o in enumerate(ops)}
    times, _, _ = measure.device_times(
        {"x": (lambda o: launches[index[id(o[0])]](), ops, measure.cupy_graph_ms)})
    return times["x"] * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args(argv)
    import cupy
    import numpy as np

    from cupyconv._core.dtypes import numpy_dtype
    from cupyconv._core.kernels import TMA_TILES
    from cupyconv._core.launch import sm_count
    from cupyconv._gemm import tma_conv, tma_splits
    from cupyconv._gemm.tma import output_tiles, prepare_gemm_tma

    dt = numpy_dtype(args.dtype)
    sms = sm_count(0)
    l2 = measure.device_facts()["l2_bytes"]
    rng = np.random.default_rng(46)

    def rand(shape):
        return cupy.asarray(rng.standard_normal(shape).astype(np.float32).astype(dt))

    print(f"{args.dtype}, batch {args.batch}, {sms} multiprocessors: device us per call "
          f"(est: tma_splits.split_seconds); * = the parts tma_splits picks")
    for per_image, k, c in POINTWISE:
        pixels = args.batch * per_image
        copies = measure.rotation_copies(l2, dt.itemsize * (pixels * (k + c) + k * c))
        ops = [(rand((pixels, k)), rand((pixels, c)), cupy.empty((k, c), dt))
               for _ in range(copies)]
        tiles = output_tiles(k, c, tma_splits.CONV_TILE)
        slices = math.ceil(pixels / tma_splits.CONV_TILE[2])
        picked = tma_splits.weight_splits(k, c, pixels, sms)
        wide = _timed([prepare_gemm_tma(d.T, x, w, tile=TMA_TILES[0])[0] for d, x, w in ops],
                      ops)
        row = [f"128 x 256 unsplit: {wide:.1f}"]
        for parts in PARTS:
            if parts > max(1, slices // 4):
                break
            t = _timed([prepare_gemm_tma(d.T, x, w, tile=tma_splits.CONV_TILE,
                                         splits=parts)[0] for d, x, w in ops], ops)
            est = tma_splits.split_seconds(tiles, slices, parts, k * c, sms,
                                           tma_splits.SLICE_S) * 1e6
            row.append(f"{parts}{'*' if parts == picked else ''}: {t:.1f} (est {est:.1f})")
        print(f"1x1 wgrad {per_image} px x {args.batch} K={k} C={c}: " + "; ".join(row),
              flush=True)
    real = tma_conv.weight_splits
    try:
        for c, hw in IM2COL:
            pixels = args.batch * hw * hw
            copies = measure.rotation_copies(l2, dt.itemsize * (2 * pixels * c + 9 * c * c))
            ops = [(rand((args.batch, hw, hw, c)), rand((args.batch, hw, hw, c)))
                   for _ in range(copies)]
            tiles = output_tiles(c, 9 * c, tma_splits.CONV_TILE)
            slices = math.ceil(pixels / tma_splits.CONV_TILE[2])
            picked = real(c, 9 * c, pixels, sms, tma_splits.IM2COL_SLICE_S)
            row = []
            for parts in PARTS:
                if parts > max(1, slices // 4):
                    break
                tma_conv.weight_splits = lambda *a, parts=parts: parts
                t = _timed([tma_conv.prepare_im2col_weight(a, b, cupy.empty((c, 3, 3, c), dt),
                                                           padding=(1, 1))[0] for a, b in ops],
                           ops)
                est = tma_splits.split_seconds(tiles, slices, parts, 9 * c * c, sms,
                                               tma_splits.IM2COL_SLICE_S) * 1e6
                row.append(f"{parts}{'*' if parts == picked else ''}: {t:.1f} (est {est:.1f})")
            print(f"3x3 wgrad C=K={c} @{hw}: " + "; ".join(row), flush=True)
    finally:
        tma_conv.weight_splits = real
    return 0


if __name__ == "__main__":
    sys.exit(main())
