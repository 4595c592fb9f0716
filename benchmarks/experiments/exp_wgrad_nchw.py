"""Channels-first backward-weight: x read through its strides against a channels-last copy of x
(``cupyconv._gemm.backward.STAGE_NCHW_X``), on the ResNet-50 layers of the suite, fp32, TF32,
fp16 and bf16, with cuDNN at the same precision for scale.

    python3 benchmarks/experiments/exp_wgrad_nchw.py [--repeat 10] [--precision tf32,fp16]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def layer_operands(torch, name: str, dtype: str, l2_bytes: int):
    """``(opts, x_shape, w_shape, tops, cops)`` of suite layer ``name`` in channels-first
    ``dtype``: conv options, shapes, and (x, dy) operand copies rotated past the L2 as PyTorch
    tensors (``tops``) and the same memory as CuPy arrays (``cops``)."""
    n, c, h, w, k, r, s, p, d, g = SUITE[name]
    opts = dict(stride=s, padding=p, dilation=d, groups=g)
    x_shape, w_shape = (n, c, h, w), (k, c // g, r, r)
    y_shape = tuple(torch.nn.functional.conv2d(torch.empty((1, c, h, w), device="cuda"),
                                               torch.empty(w_shape, device="cuda"),
                                               **opts).shape[1:])
    item = torch.empty((), dtype=measure.torch_dtype(torch, dtype)).element_size()
    per_copy = (math.prod(x_shape) + n * math.prod(y_shape)) * item
    copies = measure.rotation_copies(l2_bytes, per_copy)
    tops = measure.torch_operand_copies(torch, (x_shape, (n, *y_shape)), dtype, False, copies)
    cops = [tuple(cupy.from_dlpack(t) for t in pair) for pair in tops]
    return opts, x_shape, w_shape, tops, cops


def main(argv=None) -> int:
    args, labels = measure.precision_experiment_args(__doc__, PRECISIONS, argv)
    torch = measure.load_torch()
    l2 = measure.device_facts()["l2_bytes"]
    for name in LAYERS:
        for label, dtype, precision in PRECISIONS:
            if labels and label not in labels:
                continue
            opts, _, w_shape, tops, cops = layer_operands(torch, name, dtype, l2)
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
            times["cudnn"] = time_gpu(measure.rotating(
                lambda o: torch.nn.grad.conv2d_weight(o[0], w_shape, o[1], **opts), tops),
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
