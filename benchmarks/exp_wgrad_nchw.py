"""Channels-first backward-weight: x read through its strides against a channels-last copy of x
(``cupyconv._gemm.backward.STAGE_NCHW_X``), on the ResNet-50 layers of the suite, fp32, TF32,
fp16 and bf16, with cuDNN at the same precision for scale.

    python3 benchmarks/exp_wgrad_nchw.py [--repeat 10] [--precision tf32,fp16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import SUITE  # noqa: E402
from bench_precision import LAYERS  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._gemm import backward  # noqa: E402
from measure import time_gpu  # noqa: E402

PRECISIONS = (("fp32", "float32", "exact"), ("tf32", "float32", "tf32"),
              ("fp16", "float16", "exact"), ("bf16", "bfloat16", "exact"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--precision", default="", help="comma-separated labels (default: all): "
                    + ", ".join(p[0] for p in PRECISIONS))
    args = ap.parse_args(argv)
    labels = tuple(v for v in args.precision.split(",") if v)
    torch = measure.load_torch()
    l2 = measure.device_facts()["l2_bytes"]
    for name in LAYERS:
        n, c, h, w, k, r, s, p, d, g = SUITE[name]
        opts = dict(stride=s, padding=p, dilation=d, groups=g)
        for label, dtype, precision in PRECISIONS:
            if labels and label not in labels:
                continue
            tdt = measure.torch_dtype(torch, dtype)
            x0 = torch.empty((n, c, h, w), device="cuda").uniform_(-1, 1)
            w0 = torch.empty((k, c // g, r, r), device="cuda").uniform_(-1, 1)
            y_shape = torch.nn.functional.conv2d(x0[:1], w0, **opts).shape[1:]
            per_copy = (x0.numel() + n * int(torch.tensor(y_shape).prod())) * x0.element_size()
            copies = measure.rotation_copies(l2, per_copy)
            tops = [(torch.empty_like(x0).uniform_(-1, 1).to(tdt),
                     torch.empty((n, *y_shape), device="cuda").uniform_(-1, 1).to(tdt))
                    for _ in range(copies)]
            cops = [tuple(cupy.from_dlpack(t) for t in pair) for pair in tops]
            w_shape = tuple(w0.shape)
            times = {}
            for stage in (False, True):
                backward.STAGE_NCHW_X = stage
                clear_caches()
                times["staged" if stage else "strided"] = time_gpu(measure.rotating(
                    lambda o: cupyconv.conv_backward_weight(o[0], o[1], w_shape,
                                                            precision=precision, **opts), cops),
                    repeat=args.repeat)
            backward.STAGE_NCHW_X = None
            measure.set_cudnn_tf32(torch, precision == "tf32")
            wt = w0.to(tdt)
            times["cudnn"] = time_gpu(measure.rotating(
                lambda o: torch.nn.grad.conv2d_weight(o[0], wt.shape, o[1], **opts), tops),
                repeat=args.repeat)
            measure.set_cudnn_tf32(torch, False)
            print(f"{name:22s} {label:5s} strided {times['strided']:.4f}  staged "
                  f"{times['staged']:.4f}  cuDNN {times['cudnn']:.4f} ms  "
                  f"(ratio {times['cudnn'] / times['strided']:.2f}x -> "
                  f"{times['cudnn'] / times['staged']:.2f}x)", flush=True)
            del tops, cops
    return 0


if __name__ == "__main__":
    sys.exit(main())
