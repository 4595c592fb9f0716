"""Whole-network benchmark (issue 15): every conv of ResNet-50 and MobileNetV2 as one pass.

    python3 benchmarks/bench_network.py --out DIR [--networks resnet50,mobilenetv2]
        [--batches 1,32] [--dtypes float32,float16] [--repeat 5] [--target-ms 60]

For each network x batch x dtype, one pass runs the network's convolutions (benchmarks/
networks.py, 224x224 input) as a Python loop of ``cupyconv.conv`` calls, each layer on its own
pre-allocated random input and weight (no bias; outputs discarded), in NCHW, and for float16
also in NHWC.  Peers run the same layers with ``torch.nn.functional.conv2d`` on the same arrays
(``torch.from_dlpack``), cuDNN autotuned (``torch.backends.cudnn.benchmark = True``):

    float32: cudnn_fp32 (TF32 off: exact, as cupyconv) and cudnn_tf32 (PyTorch's default);
    float16: cudnn_fp16 (NCHW) and cudnn_fp16_cl (channels_last inputs and weights).

Two times per pass:
- ``wall_ms``: perf_counter around a loop of eager passes ending in a device synchronize,
  divided by the passes (median of ``--repeat`` loops): what a Python training/inference loop
  of these calls costs, host overhead included;
- ``graph_ms``: the replay time of a CUDA graph of the pass (CuPy stream capture for cupyconv,
  ``torch.cuda.CUDAGraph`` for the peers), timed with CUDA events: device time, no host.
Operands rotate: R copies of every layer's input and weight, R = ceil(3 x L2 / bytes of one
pass's inputs + weights) capped at 8 (1 at batch 32), copy i % R in pass i; the graph holds R
passes, one per copy, and its time is divided by R.  Ratios: peer ms / cupyconv ms (> 1:
cupyconv faster).  ``max_err``: the largest per-layer ||ours - peer|| / ||peer|| against
cudnn_fp32 (float32) or cudnn_fp16 (float16) on the first copy.

Writes ``network-<gpu>-<commit>.json`` into ``--out``; benchmarks/report.py renders it.
Without PyTorch the peers are None and cupyconv still runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupyconv  # noqa: E402
import measure  # noqa: E402
from bench import git_commit  # noqa: E402
from networks import NETWORKS, pass_bytes, total_macs  # noqa: E402

ITEMSIZE = {"float32": 4, "float16": 2}
# peer name -> (dtype, TF32 allowed, channels_last); the first of each dtype is the error reference
PEERS = {
    "cudnn_fp32": ("float32", False, False),
    "cudnn_tf32": ("float32", True, False),
    "cudnn_fp16": ("float16", False, False),
    "cudnn_fp16_cl": ("float16", False, True),
}
PEER_LABELS = {"cudnn_fp32": "cuDNN fp32 (TF32 off)", "cudnn_tf32": "cuDNN TF32 (PyTorch default)",
               "cudnn_fp16": "cuDNN fp16 NCHW", "cudnn_fp16_cl": "cuDNN fp16 channels_last"}


def layouts_for(dtype: str) -> tuple[str, ...]:
    """cupyconv rows of a dtype: NCHW always, NHWC beside it for float16."""
    return ("NCHW", "NHWC") if dtype == "float16" else ("NCHW",)


def peers_for(dtype: str) -> list[str]:
    return [name for name, (d, _, _) in PEERS.items() if d == dtype]


def ratios(ours: dict, peers: dict | None) -> dict | None:
    """{"wall": {peer: peer wall / ours wall}, "graph": {...}} for one cupyconv row."""
    if not peers:
        return None
    return {kind: {name: measure.ratio(p.get(f"{kind}_ms"), ours.get(f"{kind}_ms"))
                   for name, p in peers.items()} for kind in ("wall", "graph")}


def make_operands(layers, batch: int, dtype: str, copies: int, seed: int) -> list[list[tuple]]:
    """``copies`` lists of (x, w) per layer, NCHW, uniform(-1, 1) rounded to ``dtype``."""
    import cupy

    rng = cupy.random.default_rng(seed)
    out = []
    for _ in range(copies):
        out.append([(rng.uniform(-1, 1, layer.input_shape(batch), dtype=cupy.float32).astype(dtype),
                     rng.uniform(-1, 1, layer.weight_shape(), dtype=cupy.float32).astype(dtype))
                    for layer in layers])
    return out


def to_nhwc(operands) -> list[list[tuple]]:
    """The same values channels-last: x (N, H, W, C) and w (K, kh, kw, C/g), C-contiguous."""
    import cupy

    return [[(cupy.ascontiguousarray(x.transpose(0, 2, 3, 1)),
              cupy.ascontiguousarray(w.transpose(0, 2, 3, 1))) for x, w in copy]
            for copy in operands]


def cupyconv_pass(layers, operands, layout: str):
    """``run(r, keep=False)``: one pass over copy r; returns the outputs when ``keep``."""

    def run(r, keep=False):
        outs = [] if keep else None
        for layer, (x, w) in zip(layers, operands[r]):
            y = cupyconv.conv(x, w, stride=layer.stride, padding=layer.padding,
                              groups=layer.groups, layout=layout)
            if keep:
                outs.append(y)
        return outs

    return run


def torch_operands(torch, operands, operands_nhwc, channels_last: bool):
    """The peer's tensors over the same memory: NCHW tensors of the NCHW arrays, or channels_last
    tensors (NCHW shape, NHWC strides) of the NHWC arrays; ``.to(channels_last)`` copies only
    where a view is not already in that format."""
    if not channels_last:
        return [[(torch.from_dlpack(x), torch.from_dlpack(w)) for x, w in copy]
                for copy in operands]
    cl = torch.channels_last
    return [[(torch.from_dlpack(x).permute(0, 3, 1, 2).to(memory_format=cl),
              torch.from_dlpack(w).permute(0, 3, 1, 2).to(memory_format=cl)) for x, w in copy]
            for copy in operands_nhwc]


def torch_pass(torch, layers, tensors):
    import torch.nn.functional as F

    def run(r, keep=False):
        outs = [] if keep else None
        for layer, (x, w) in zip(layers, tensors[r]):
            y = F.conv2d(x, w, None, layer.stride, layer.padding, 1, layer.groups)
            if keep:
                outs.append(y)
        return outs

    return run


def time_pass(run, copies: int, graph_ms, args) -> dict:
    """Warm-up (compiles, plans, autotunes), then the wall time of eager passes and the replay
    time of a graph of ``copies`` passes (one per copy)."""
    for r in range(copies):
        run(r)
    measure.synchronize()
    wall = measure.wall_ms(measure.rotating(run, range(copies)), multiple=copies,
                           repeat=args.repeat, target_ms=args.target_ms)
    graph = graph_ms(lambda: [run(r, keep=True) for r in range(copies)], per_graph=copies,
                     repeat=args.repeat, target_ms=args.target_ms)
    return {"wall_ms": wall, "graph_ms": graph}


def max_error(ours, ref) -> float:
    return max(measure.rel_err_gpu(a, b) for a, b in zip(ours, ref))


def run_config(net: str, batch: int, dtype: str, l2: int, torch, args) -> dict:
    t0 = time.perf_counter()
    layers = NETWORKS[net]()
    nbytes = pass_bytes(layers, batch, ITEMSIZE[dtype])
    copies = measure.rotation_copies(l2, nbytes)
    print(f"\n== {net} batch {batch} {dtype}: {len(layers)} convs, "
          f"{2 * total_macs(layers, batch) / 1e9:.2f} GFLOP, operands {nbytes / 1e6:.1f} MB x "
          f"{copies} copies", flush=True)
    operands = make_operands(layers, batch, dtype, copies,
                             seed=zlib.crc32(f"{net}-{batch}-{dtype}".encode()))
    nhwc = to_nhwc(operands) if "NHWC" in layouts_for(dtype) else None
    row = {"network": net, "batch": batch, "dtype": dtype, "layers": len(layers),
           "gflop": 2 * total_macs(layers, batch) / 1e9, "pass_bytes": nbytes, "copies": copies,
           "working_set_bytes": nbytes * copies, "cupyconv": {}, "peers": None, "ratios": None}
    ours_out = {}
    for layout in layouts_for(dtype):
        run = cupyconv_pass(layers, operands if layout == "NCHW" else nhwc, layout)
        t = time.perf_counter()
        run(0)
        measure.synchronize()
        first = time.perf_counter() - t
        row["cupyconv"][layout] = time_pass(run, copies, measure.cupy_graph_ms, args)
        row["cupyconv"][layout]["first_pass_s"] = first
        out = run(0, keep=True)
        ours_out[layout] = [y if layout == "NCHW" else y.transpose(0, 3, 1, 2) for y in out]
        timed = row["cupyconv"][layout]
        print(f"  cupyconv {layout}: wall {timed['wall_ms']:.3f} ms, graph "
              f"{timed['graph_ms']:.3f} ms (first pass {first:.1f} s)", flush=True)
    if torch is not None:
        row["peers"] = {}
        ref = None
        for name in peers_for(dtype):
            _, tf32, channels_last = PEERS[name]
            tf32_read = measure.set_cudnn_tf32(torch, tf32)
            run = torch_pass(torch, layers, torch_operands(torch, operands, nhwc, channels_last))
            row["peers"][name] = time_pass(run, copies, lambda body, **kw: measure.torch_graph_ms(
                torch, body, **kw), args)
            row["peers"][name].update(tf32=tf32_read, channels_last=channels_last)
            if ref is None:  # the first peer of the dtype: cuDNN without TF32, NCHW
                ref = run(0, keep=True)
                for layout, out in ours_out.items():
                    row["cupyconv"][layout]["max_err"] = max_error(out, ref)
            print(f"  {name:14s}: wall {row['peers'][name]['wall_ms']:.3f} ms, graph "
                  f"{row['peers'][name]['graph_ms']:.3f} ms", flush=True)
        measure.set_cudnn_tf32(torch, False)
        row["ratios"] = {layout: ratios(row["cupyconv"][layout], row["peers"])
                         for layout in row["cupyconv"]}
        for layout, r in row["ratios"].items():
            print(f"  peer / cupyconv {layout}: " + "  ".join(
                f"{name} wall {_fmt(r['wall'][name])} graph {_fmt(r['graph'][name])}"
                for name in row["peers"]), flush=True)
    row["seconds"] = time.perf_counter() - t0
    return row


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--networks", default="resnet50,mobilenetv2")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--repeat", type=int, default=5, help="timed loops per measurement")
    parser.add_argument("--target-ms", type=float, default=60.0, help="length of one timed loop")
    args = parser.parse_args(argv)
    nets = [n for n in args.networks.split(",") if n]
    unknown = [n for n in nets if n not in NETWORKS]
    if unknown:
        parser.error(f"unknown networks {unknown}; choose from {sorted(NETWORKS)}")
    dtypes = [d for d in args.dtypes.split(",") if d]
    if set(dtypes) - set(ITEMSIZE):
        parser.error(f"dtypes must be among {sorted(ITEMSIZE)}")
    batches = [int(b) for b in args.batches.split(",") if b]

    facts = measure.device_facts()
    torch = measure.load_torch()
    facts.update(measure.torch_facts(torch))
    print(f"GPU {facts['gpu']} (L2 {facts['l2_bytes'] / 2 ** 20:.0f} MiB); cupy {facts['cupy']}; "
          f"torch {facts['torch'] or 'absent'}; cuDNN {facts['cudnn']}; commit {git_commit()}",
          flush=True)
    t0 = time.perf_counter()
    rows = []
    for net in nets:
        for batch in batches:
            for dtype in dtypes:
                rows.append(run_config(net, batch, dtype, facts["l2_bytes"], torch, args))
                measure.release_memory(torch)  # this configuration's arrays are gone now
    result = {"benchmark": "network", **facts, "python": platform.python_version(),
              "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "settings": {"repeat": args.repeat, "target_ms": args.target_ms,
                           "l2_factor": measure.L2_FACTOR, "max_copies": measure.MAX_COPIES,
                           "cudnn_benchmark": torch is not None},
              "peer_labels": PEER_LABELS, "rows": rows,
              "seconds": time.perf_counter() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"network-{facts['gpu'].replace(' ', '_')}-{git_commit()}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"\n{len(rows)} configurations in {result['seconds']:.0f} s; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
