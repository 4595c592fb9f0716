"""Diagnostic: per-layer device time of a network's convs, cupyconv (with its chosen algorithm and
launch count) against cuDNN, to find the layers that hold a network benchmark back.

    python3 benchmarks/network_layers.py mobilenetv2 --batch 1 --dtype float32
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import networks  # noqa: E402
from measure import time_gpu  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("network", choices=sorted(networks.NETWORKS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--layout", default="NCHW")
    args = parser.parse_args(argv)

    import cupy
    import torch
    import torch.nn.functional as F

    import cupyconv as cc
    from cupyconv._dispatch import callcache
    from cupyconv._dispatch.choose import choose

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    total_ours = total_peer = 0.0
    nhwc = args.layout == "NHWC"
    for i, layer in enumerate(networks.NETWORKS[args.network]()):
        xs = layer.input_shape(args.batch, args.layout)
        ws = ((layer.out_channels, layer.kernel, layer.kernel, layer.in_channels // layer.groups)
              if nhwc else (layer.out_channels, layer.in_channels // layer.groups, layer.kernel,
                            layer.kernel))
        x = cupy.random.uniform(-1, 1, xs).astype(args.dtype)
        w = cupy.random.uniform(-1, 1, ws).astype(args.dtype)
        opts = dict(stride=layer.stride, padding=layer.padding, groups=layer.groups,
                    layout=args.layout)
        geom = cc.ConvGeometry.from_shapes(xs, ws, dtype=args.dtype, **opts)
        callcache.clear()
        cc.conv(x, w, **opts)
        call = next(iter(callcache._calls.values()))
        prog = getattr(call.replay, "__self__", None)
        launches = len(prog.steps) if prog is not None else -1
        ours = time_gpu(lambda: cc.conv(x, w, **opts), repeat=10)
        xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
        if nhwc:
            xt = xt.permute(0, 3, 1, 2)
            wt = wt.permute(0, 3, 1, 2)
        peer = time_gpu(lambda: F.conv2d(xt, wt, stride=layer.stride, padding=layer.padding,
                                         groups=layer.groups), repeat=10)
        total_ours += ours
        total_peer += peer
        print(f"{i:2d} {layer.name:18s} C{layer.in_channels:5d} K{layer.out_channels:5d} "
              f"{layer.H:4d}x{layer.W:<4d} k{layer.kernel} s{layer.stride} g{layer.groups:5d}  "
              f"{choose(geom, 'auto').name:14s} launches {launches}  ours {ours * 1e3:8.1f} us  "
              f"cudnn {peer * 1e3:8.1f} us  ratio {peer / ours:5.2f}", flush=True)
    print(f"total: ours {total_ours:.3f} ms, cudnn {total_peer:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
