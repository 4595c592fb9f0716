"""Issue 46: where the 3-channel stems' time goes (ResNet-50's 7x7 s2 3->64, EfficientNet-B0's
3x3 s2 3->32, ConvNeXt-T's 4x4 s4 3->96; channels-last, batch 32): each forward method's time,
backward-data's and backward-weight's, cuDNN's forward beside them (eager calls between events),
and the device time of every kernel of one call of each pass (torch.profiler, which sees
CuPy's launches too).

    python3 benchmarks/experiments/exp_stems.py [--batch 32] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measure  # noqa: E402

# (label, C, K, H (= W), kernel, stride, padding)
STEMS = [("r50 7x7 s2 3->64", 3, 64, 224, 7, 2, 3), ("effnet 3x3 s2 3->32", 3, 32, 224, 3, 2, 1),
         ("cnx 4x4 s4 3->96", 3, 96, 224, 4, 4, 0)]
METHODS = ("auto", "implicit_gemm", "im2col_gemm", "direct")


def event_us(fn, repeat: int = 20) -> float:
    """Microseconds per call of ``fn`` over ``repeat`` back-to-back calls after one warm-up."""
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / repeat * 1e3


def kernel_us(torch, fn, calls: int = 5) -> list[tuple[float, str]]:
    """(device us per call, kernel name) of every kernel ``fn`` launches, largest first."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            rows[evt.name] = rows.get(evt.name, 0.0) + evt.device_time / calls
    return sorted(((us, name) for name, us in rows.items()), reverse=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args(argv)
    torch = measure.load_torch()
    if torch is None:
        return 1  # (the profile and the cuDNN column need PyTorch)
    import cupy

    import cupyconv

    torch.backends.cudnn.benchmark = True
    for label, c, k, hw, ks, st, pad in STEMS:
        oh = (hw + 2 * pad - ks) // st + 1
        shapes = [(args.batch, c, hw, hw), (k, c, ks, ks), (args.batch, k, oh, oh)]
        xt, wt, dyt = measure.torch_operand_copies(torch, shapes, args.dtype, True, 1, seed=0)[0]
        x, w, dy = (measure.cupy_view(t, True) for t in (xt, wt, dyt))
        opts = dict(stride=st, padding=pad, layout="NHWC")
        print(f"== {label}, {args.dtype}, batch {args.batch}", flush=True)
        for m in METHODS:
            try:
                us = event_us(lambda m=m: cupyconv.conv(x, w, method=m, **opts))
                print(f"  forward {m:14s} {us:8.1f} us", flush=True)
            except ValueError as exc:
                print(f"  forward {m}: {exc}")
        data = lambda: cupyconv.conv_backward_data(dy, w, x.shape, **opts)  # noqa: E731
        weight = lambda: cupyconv.conv_backward_weight(x, dy, w.shape, **opts)  # noqa: E731
        print(f"  backward-data {event_us(data):8.1f} us   backward-weight "
              f"{event_us(weight):8.1f} us", flush=True)
        cudnn = lambda: torch.nn.functional.conv2d(xt, wt, stride=st, padding=pad)  # noqa: E731
        print(f"  cuDNN forward {event_us(cudnn):8.1f} us", flush=True)
        forward = lambda: cupyconv.conv(x, w, **opts)  # noqa: E731
        for name, fn in (("forward", forward), ("backward-data", data), ("backward-weight", weight)):
            print(f"  [{name}] kernels, us per call:")
            for us, kernel in kernel_us(torch, fn):
                print(f"    {us:8.1f}  {kernel[:100]}")
        cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
