"""Width unfolding of few-channel layers (``cupyconv._gemm.staging.UNFOLD_W``): the forward pass
on a channel-padded copy of x (K = taps x channels padded to a 16-byte chunk) against a copy whose
channels are a kernel row's (tap, channel) columns (K = rows x that row padded once), on the
tensor-core loops, with cuDNN at the same precision and layout for scale.

    python3 benchmarks/experiments/exp_unfold.py [--repeat 10] [--precision fp16,tf32]

Problems: image-input layers (ResNet's 7x7 stride 2, VGG's 3x3, a 5x5 on one channel), a 1-d
audio front end and a 3-d one-channel volume; none of them is in the suite the threshold
(UNFOLD_GAIN) is judged on -- `bench_precision.py` runs ResNet-50's conv1 again.
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
from cupyconv._core.caches import clear_caches  # noqa: E402
from cupyconv._gemm import staging  # noqa: E402
from measure import time_gpu  # noqa: E402

PRECISIONS = (("fp16", "float16", "exact"), ("bf16", "bfloat16", "exact"),
              ("tf32", "float32", "tf32"))
# name: (x shape NCHW-style, w shape, conv options)
PROBLEMS = {
    "resnet conv1 7x7 s2 b32": ((32, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),
    "resnet conv1 7x7 s2 b8": ((8, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),
    "vgg 3x3 c3 b16": ((16, 3, 224, 224), (64, 3, 3, 3), dict(padding=1)),
    "5x5 c1 b64 128^2": ((64, 1, 128, 128), (32, 1, 5, 5), dict(padding=2)),
    "1-d c1 k80 s4": ((32, 1, 32000), (128, 1, 80), dict(stride=4)),
    "3-d c1 3^3 64^3": ((8, 1, 64, 64, 64), (32, 1, 3, 3, 3), dict(padding=1)),
}


def main(argv=None) -> int:
    args, labels = measure.precision_experiment_args(__doc__, PRECISIONS, argv)
    torch = measure.load_torch()
    F = torch.nn.functional
    l2 = measure.device_facts()["l2_bytes"]
    for name, (x_shape, w_shape, opts) in PROBLEMS.items():
        nd = len(x_shape) - 2
        conv_t = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
        for label, dtype, precision in PRECISIONS:
            if labels and label not in labels:
                continue
            for layout in ("NCHW", "NHWC"):
                cl = layout == "NHWC"
                item = 2 if dtype != "float32" else 4
                copies = measure.rotation_copies(l2, math.prod(x_shape) * item * 4)
                # channels-last: the peer gets its channels_last tensors where torch has them
                # (4-d); ours reads the same memory as NHWC
                fmt = cl and nd == 2
                tops = measure.torch_operand_copies(torch, (x_shape,), dtype, fmt, copies)
                w0 = measure.torch_operand_copies(torch, (w_shape,), dtype, fmt, 1, seed=1)[0][0]
                if cl and nd == 2:
                    cops = [measure.cupy_view(t[0], True) for t in tops]
                    wc = measure.cupy_view(w0, True)
                elif cl:  # 1-d and 3-d: a channels-last copy for us, torch keeps its own
                    cops = [cupy.ascontiguousarray(cupy.moveaxis(cupy.from_dlpack(t[0]), 1, -1))
                            for t in tops]
                    wc = cupy.ascontiguousarray(cupy.moveaxis(cupy.from_dlpack(w0), 1, -1))
                else:
                    cops = [cupy.from_dlpack(t[0]) for t in tops]
                    wc = cupy.from_dlpack(w0)
                times = {}
                for mode in (None, False, True):
                    staging.UNFOLD_W = mode
                    clear_caches()
                    times[mode] = time_gpu(measure.rotating(
                        lambda x: cupyconv.conv(x, wc, precision=precision, layout=layout,
                                                **opts), cops),
                        repeat=args.repeat)
                staging.UNFOLD_W = None
                measure.set_cudnn_tf32(torch, precision == "tf32")
                torch.backends.cudnn.benchmark = True
                ref = time_gpu(measure.rotating(lambda x: conv_t(x, w0, **opts),
                                                [t[0] for t in tops]), repeat=args.repeat)
                measure.set_cudnn_tf32(torch, False)
                print(f"{name:26s} {label:5s} {layout} padded {times[False]:.4f} unfolded "
                      f"{times[True]:.4f} auto {times[None]:.4f} cuDNN {ref:.4f} "
                      f"({ref / times[False]:.2f}x -> {ref / times[None]:.2f}x)", flush=True)
                del tops, cops
    return 0


if __name__ == "__main__":
    sys.exit(main())
