"""Channels-first forward and backward-data on the tensor-core loops: x (dy) read through its
strides by the register-staged loop against a channels-last copy that feeds the multistage one
(``cupyconv._gemm.staging.STAGE_CF_X``), on the ResNet-50 layers of the suite, TF32, fp16 and
bf16, with cuDNN at the same precision for scale.

    python3 benchmarks/experiments/exp_stage_nchw.py [--repeat 10] [--precision tf32]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench_precision import LAYERS  # noqa: E402
from exp_wgrad_nchw import layer_operands  # noqa: E402
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._gemm import staging  # noqa: E402
from measure import time_gpu  # noqa: E402

PRECISIONS = (("tf32", "float32", "tf32"), ("fp16", "float16", "exact"),
              ("bf16", "bfloat16", "exact"))


def main(argv=None) -> int:
    args, labels = measure.precision_experiment_args(__doc__, PRECISIONS, argv)
    torch = measure.load_torch()
    F, grad = torch.nn.functional, torch.nn.grad
    l2 = measure.device_facts()["l2_bytes"]
    for name in LAYERS:
        for label, dtype, precision in PRECISIONS:
            if labels and label not in labels:
                continue
            opts, x_shape, w_shape, tops, cops = layer_operands(torch, name, dtype, l2)
            w0 = measure.torch_operand_copies(torch, (w_shape,), dtype, False, 1, seed=1)[0][0]
            wc = cupy.from_dlpack(w0)
            ours = {"forward": lambda o: cupyconv.conv(o[0], wc, precision=precision, **opts),
                    "data": lambda o: cupyconv.conv_backward_data(o[1], wc, x_shape,
                                                                  precision=precision, **opts)}
            peer = {"forward": lambda o: F.conv2d(o[0], w0, **opts),
                    "data": lambda o: grad.conv2d_input(x_shape, w0, o[1], **opts)}
            line = []
            for pas in ("forward", "data"):
                times = {}
                for stage in (None, True):
                    staging.STAGE_CF_X = stage
                    clear_caches()
                    times[stage] = time_gpu(measure.rotating(ours[pas], cops), repeat=args.repeat)
                staging.STAGE_CF_X = None
                measure.set_cudnn_tf32(torch, precision == "tf32")
                ref = time_gpu(measure.rotating(peer[pas], tops), repeat=args.repeat)
                measure.set_cudnn_tf32(torch, False)
                line.append(f"{pas} as-is {times[None]:.4f} staged {times[True]:.4f} cuDNN "
                            f"{ref:.4f} ({ref / times[None]:.2f}x -> {ref / times[True]:.2f}x)")
            print(f"{name:22s} {label:5s} " + " | ".join(line), flush=True)
            del tops, cops
    return 0


if __name__ == "__main__":
    sys.exit(main())
