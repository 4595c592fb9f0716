"""Issue 46: channels-last forward convolutions on the TMA kernel's im2col mode
(``_gemm/tma_conv.prepare_im2col``) against the implicit cp.async loop (cupyconv.conv
with the im2col route switched off in this process) and cuDNN (channels_last, autotuned), bf16
or fp16, batch 32, on the 3x3 and strided layers of ResNet-50 and ConvNeXt-T's 2x2
downsampling: device time of CUDA-graph replays over operands rotated past 3x the L2
(``measure.device_times``), and each result's error against the implicit loop's.  With
``--passes data``, backward-data of the stride-1 layers the same way (cuDNN: conv2d_input); with
``weight``, backward-weight of the layers of a multiple of 64 input channels (conv2d_weight).
Strided layers' backward-data: cupyconv's call with its stride phases on the im2col mode
(``tma_conv.im2col_phases``) against the same call on the implicit loop.  (At 53d7cdf,
before the route existed, the "default" column was that loop.)

    PYTHONPATH=. python3 benchmarks/experiments/exp_tma_im2col.py [--dtype bfloat16] [--batch 32]
        [--passes forward,data,weight]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measure  # noqa: E402

# (label, C, K, H (= W), kernel, stride, padding)
LAYERS = [
    ("r50 3x3 64 @56", 64, 64, 56, 3, 1, 1),
    ("r50 3x3 128 @28", 128, 128, 28, 3, 1, 1),
    ("r50 3x3 256 @14", 256, 256, 14, 3, 1, 1),
    ("r50 3x3 512 @7", 512, 512, 7, 3, 1, 1),
    ("r50 3x3 s2 128 @56", 128, 128, 56, 3, 2, 1),
    ("r50 3x3 s2 256 @28", 256, 256, 28, 3, 2, 1),
    ("r50 3x3 s2 512 @14", 512, 512, 14, 3, 2, 1),
    ("r50 1x1 s2 256->512 @56", 256, 512, 56, 1, 2, 0),
    ("r50 1x1 s2 512->1024 @28", 512, 1024, 28, 1, 2, 0),
    ("r50 1x1 s2 1024->2048 @14", 1024, 2048, 14, 1, 2, 0),
    ("cnx 2x2 s2 96->192 @56", 96, 192, 56, 2, 2, 0),
    ("cnx 2x2 s2 384->768 @14", 384, 768, 14, 2, 2, 0),
]


# Whether cupyconv's strided backward-data runs its phases on the im2col mode (switched by the
# "data" pass's columns of a strided layer).
STRIDED_PHASES = {"on": False}


def layer_calls(torch, c, k, hw, ks, st, pad, batch, dtype, mode, l2):
    """(calls for measure.device_times, the im2col result, the implicit loop's) of one layer in
    ``mode`` ("forward", "data" or "weight")."""
    import cupy

    import cupyconv
    from cupyconv._gemm.tma_conv import prepare_im2col, prepare_im2col_weight

    oh = (hw + 2 * pad - ks) // st + 1
    nbytes = 2 * (batch * hw * hw * c + k * ks * ks * c + batch * oh * oh * k)
    copies = measure.rotation_copies(l2, nbytes, cap=8)
    # data: (dy, w); weight: (x, dy); forward: (x, w); in NCHW shapes
    x_nchw, dy_nchw, w_nchw = (batch, c, hw, hw), (batch, k, oh, oh), (k, c, ks, ks)
    shapes = {"data": [dy_nchw, w_nchw], "weight": [x_nchw, dy_nchw],
              "forward": [x_nchw, w_nchw]}[mode]
    tensors = measure.torch_operand_copies(torch, shapes, dtype, True, copies, seed=c + k + hw)
    arrays = [tuple(measure.cupy_view(t, True) for t in ops) for ops in tensors]
    reach = ks - 1
    if mode == "data" and st != 1:
        # strided: the stride phases on the im2col mode (cupyconv's routed call) against the
        # same call on the implicit loop; the route is switched (and prepared calls forgotten)
        # at the first call of each column, in its eager warm-up round
        from cupyconv._core.caches import clear_caches

        x_shape = (batch, hw, hw, c)

        def routed(on):
            def call(ops):
                if STRIDED_PHASES["on"] != on:
                    clear_caches()
                    STRIDED_PHASES["on"] = on
                return cupyconv.conv_backward_data(ops[0], ops[1], x_shape, stride=st,
                                                   padding=pad, layout="NHWC")
            return call

        peer = lambda ops: torch.nn.grad.conv2d_input(x_nchw, ops[1], ops[0], stride=st,  # noqa: E731
                                                      padding=pad)
        calls = {"im2col": (routed(True), arrays, measure.cupy_graph_ms),
                 "implicit": (routed(False), arrays, measure.cupy_graph_ms),
                 "cudnn": (peer, tensors,
                           lambda body, **kw: measure.torch_graph_ms(torch, body, **kw))}
        got = routed(True)(arrays[0]).copy()
        return calls, got, routed(False)(arrays[0])
    if mode == "data":
        x_shape = (batch, hw, hw, c)
        launches = [prepare_im2col(dy, w, padding=(reach - pad,) * 2, out_hw=(hw, hw), data=True)
                    for dy, w in arrays]
        ours = lambda ops: cupyconv.conv_backward_data(ops[0], ops[1], x_shape, padding=pad,  # noqa: E731
                                                       layout="NHWC")
        peer = lambda ops: torch.nn.grad.conv2d_input(x_nchw, ops[1], ops[0],  # noqa: E731
                                                      padding=pad)
    elif mode == "weight":
        w_shape = (k, ks, ks, c)
        launches = [prepare_im2col_weight(x, dy, cupy.empty(w_shape, x.dtype), stride=(st, st),
                                          padding=(pad, pad)) for x, dy in arrays]
        ours = lambda ops: cupyconv.conv_backward_weight(ops[0], ops[1], w_shape, stride=st,  # noqa: E731
                                                         padding=pad, layout="NHWC")
        peer = lambda ops: torch.nn.grad.conv2d_weight(ops[0], w_nchw, ops[1], stride=st,  # noqa: E731
                                                       padding=pad)
    else:
        launches = [prepare_im2col(x, w, stride=(st, st), padding=(pad, pad)) for x, w in arrays]
        ours = lambda ops: cupyconv.conv(ops[0], ops[1], stride=st, padding=pad, layout="NHWC")  # noqa: E731
        peer = lambda ops: torch.nn.functional.conv2d(ops[0], ops[1], stride=st, padding=pad)  # noqa: E731
    by_first = {id(ops[0]): i for i, ops in enumerate(arrays)}
    calls = {"im2col": (lambda ops: launches[by_first[id(ops[0])]][0](), arrays,
                        measure.cupy_graph_ms),
             "implicit": (ours, arrays, measure.cupy_graph_ms),
             "cudnn": (peer, tensors, lambda body, **kw: measure.torch_graph_ms(torch, body, **kw))}
    launches[0][0]()
    return calls, launches[0][1], ours(arrays[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--passes", default="forward,data,weight",
                   help="forward (every layer), data (backward-data, the stride-1 layers), "
                        "weight (backward-weight, layers of a multiple of 64 input channels)")
    args = p.parse_args(argv)
    torch = measure.load_torch()
    import cupy

    import cupyconv._gemm.backward as backward
    import cupyconv._gemm.forward as forward

    # (cupyconv's own calls: the implicit loop; strided backward-data's phases switchable)
    forward.im2col_forward = lambda *args: False
    backward.im2col_backward_data = lambda *args: False
    backward.im2col_backward_weight = lambda *args: False
    phases = backward.im2col_phases
    backward.im2col_phases = lambda *args: STRIDED_PHASES["on"] and phases(*args)
    torch.backends.cudnn.benchmark = True
    l2 = measure.device_facts()["l2_bytes"]
    for pass_name in args.passes.split(","):
        print(f"\n{pass_name}, {args.dtype}, batch {args.batch}: device us (graph replays, "
              f"operands rotated past L2); x = time / im2col time")
        print("| layer | im2col us | implicit us (x) | cuDNN us (x) | rel err vs implicit |")
        print("|---|---|---|---|---|")
        for label, c, k, hw, ks, st, pad in LAYERS:
            if pass_name == "weight" and c % 64:
                continue
            try:
                calls, got, want = layer_calls(torch, c, k, hw, ks, st, pad, args.batch,
                                               args.dtype, pass_name, l2)
            except ValueError as exc:  # (the mode's checks refused the layer)
                print(f"| {label} | refused: {exc} | | | |", flush=True)
                continue
            err = measure.rel_err_gpu(got, want)
            times, how, why = measure.device_times(calls, repeat=5, target_ms=10.0)
            t = {name: ms * 1e3 for name, ms in times.items()}
            print(f"| {label} | {t['im2col']:.1f} | {t['implicit']:.1f} "
                  f"({t['implicit'] / t['im2col']:.2f}) | {t['cudnn']:.1f} "
                  f"({t['cudnn'] / t['im2col']:.2f}) | {err:.1e}"
                  + (f" ({how}: {why})" if why else "") + " |", flush=True)
            del calls, got, want
            measure.release_memory(torch)
            cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
