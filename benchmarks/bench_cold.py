"""Cold start of a network's first pass (issue 47): what it costs with and without
``cupyconv.jit.precompile``, from an empty and from a filled disk cache, beside PyTorch's.

    python3 benchmarks/bench_cold.py [--network resnet50] [--layers A:B] [--batch 1]
        [--dtype float32] [--layout NCHW] [--passes forward|training] [--workers N] [--out DIR]

A pass calls every layer of the network once (``--layers``: a slice of them, e.g. ``0:1`` for
the first conv alone); ``--passes training`` calls the forward and both gradients of each layer
(a training step's convolutions).  Each measurement runs in a fresh process (nothing in memory)
with its own kernel caches (``CUPY_CACHE_DIR`` and ``CUPYCONV_CACHE_DIR`` in a temporary
directory); imports are not timed:

- ``first_call``: empty caches; the first pass compiles each module as a call reaches it;
- ``precompile``: empty caches; ``cupyconv.jit.precompile(problems=<the layers>)`` (its modules
  found without compiling, then compiled on ``--workers`` threads), then the first pass;
- ``disk``: the caches ``first_call`` filled; the first pass loads every module from disk;
- ``disk_precompile``: those caches again; precompile (loading on the threads), then the pass;
- ``torch``: PyTorch's first pass of the same calls (``torch.nn.grad`` for the gradients) with
  cuDNN autotuning on (``cudnn.benchmark``), where torch is installed.

Each prints seconds for precompile (where run), the first pass and a second (warm) pass, and
the number of modules and their summed compile (or load) time from ``jit.cache_info()``; the
JSON lists each module with its seconds.  Writes ``cold-<network>-<gpu>-<commit>.json`` into
``--out`` (default: print only).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from networks import NETWORKS  # noqa: E402

MODES = ("first_call", "precompile", "disk", "disk_precompile", "torch")
PASSES = {"forward": ("forward",), "training": ("forward", "backward_data", "backward_weight")}


def problems(layers, batch: int, dtype: str, layout: str, passes) -> list[dict]:
    """The layers as ``cupyconv.jit.precompile`` problems (the calls a pass makes)."""
    return [dict(x=layer.input_shape(batch, layout), w=layer.weight_shape(layout),
                 stride=layer.stride, padding=layer.padding, groups=layer.groups, layout=layout,
                 dtype=dtype, passes=passes) for layer in layers]


def selected_layers(args):
    start, _, stop = args.layers.partition(":")
    return NETWORKS[args.network]()[int(start or 0):int(stop) if stop else None]


def geometry(p) -> dict:
    return dict(stride=p["stride"], padding=p["padding"], groups=p["groups"], layout=p["layout"])


def cupyconv_pass(todo, operands):
    """One pass of the calls ``todo`` on ``operands`` (x, w, dy) through cupyconv."""
    import cupyconv

    for p, (x, w, dy) in zip(todo, operands):
        if "forward" in p["passes"]:
            cupyconv.conv(x, w, **geometry(p))
        if "backward_data" in p["passes"]:
            cupyconv.conv_backward_data(dy, w, x.shape, **geometry(p))
        if "backward_weight" in p["passes"]:
            cupyconv.conv_backward_weight(x, dy, w.shape, **geometry(p))


def torch_pass(todo, operands):
    """The same calls through PyTorch (channels-last memory format for NHWC)."""
    import torch
    import torch.nn.functional as F

    for p, (x, w, dy) in zip(todo, operands):
        conv = F.conv2d if x.dim() == 4 else F.conv1d if x.dim() == 3 else F.conv3d
        kw = dict(stride=p["stride"], padding=p["padding"], groups=p["groups"])
        if "forward" in p["passes"]:
            conv(x, w, **kw)
        grad = {4: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv1d_input,
                5: torch.nn.grad.conv3d_input}[x.dim()]
        wgrad = {4: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv1d_weight,
                 5: torch.nn.grad.conv3d_weight}[x.dim()]
        if "backward_data" in p["passes"]:
            grad(x.shape, w, dy, **kw)
        if "backward_weight" in p["passes"]:
            wgrad(x, w.shape, dy, **kw)


def child(args) -> dict:
    """One measurement in this (fresh) process: see the module docstring."""
    import cupy

    import cupyconv
    from cupyconv._core.geometry import output_shape

    todo = problems(selected_layers(args), args.batch, args.dtype, args.layout,
                    PASSES[args.passes])
    rng = cupy.random.default_rng(0)

    def operand(shape):
        return rng.uniform(-1, 1, shape, dtype=cupy.float32).astype(args.dtype)

    operands = [(operand(p["x"]), operand(p["w"]),
                 operand(output_shape(p["x"], p["w"], stride=p["stride"], padding=p["padding"],
                                      groups=p["groups"], layout=p["layout"])))
                for p in todo]
    run = cupyconv_pass
    if args.child == "torch":
        import torch

        torch.backends.cudnn.benchmark = True
        fmt = torch.channels_last if args.layout == "NHWC" else torch.contiguous_format

        def as_torch(a):  # NCHW-shaped tensors, channels-last in memory for NHWC (x, w and dy)
            t = torch.as_tensor(a, device="cuda")
            if args.layout == "NHWC" and t.dim() == 4:
                t = t.permute(0, 3, 1, 2)
            return t.contiguous(memory_format=fmt) if t.dim() == 4 else t

        operands = [tuple(as_torch(a) for a in ops) for ops in operands]
        run = torch_pass
    cupy.cuda.Device().synchronize()

    def one_pass():
        start = time.perf_counter()
        run(todo, operands)
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - start

    row = {"mode": args.child, "precompile_s": None}
    if args.child.endswith("precompile"):
        start = time.perf_counter()
        row["precompiled_modules"] = cupyconv.jit.precompile(problems=todo, workers=args.workers)
        row["precompile_s"] = time.perf_counter() - start
    row["first_pass_s"] = one_pass()
    row["second_pass_s"] = one_pass()
    info = cupyconv.jit.cache_info()
    row["modules"] = len(info["modules"])
    row["module_seconds"] = sum(m["seconds"] for m in info["modules"])
    row["module_list"] = [{"source": m["source"], "tile": m["tile"], "variants": m["variants"],
                           "dtypes": m["dtypes"], "seconds": round(m["seconds"], 3)}
                          for m in info["modules"]]
    return row


def markdown(result: dict) -> str:
    """The table of one run's JSON: a row per mode (seconds; modules and their compile time)."""
    a = result["args"]
    lines = [f"{a['network']}[{a.get('layers', ':')}] {a.get('passes', 'forward')} pass, batch "
             f"{a['batch']}, {a['dtype']} {a['layout']}; fresh processes, {result['cpus']} CPUs; "
             f"imports not timed.", "",
             "| mode | precompile s | first pass s | second pass ms | modules | their compile s |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        pre = f"{r['precompile_s']:.2f}" if r.get("precompile_s") is not None else ""
        lines.append(f"| {r['mode']} | {pre} | {r['first_pass_s']:.2f} | "
                     f"{r['second_pass_s'] * 1e3:.1f} | {r['modules']} | "
                     f"{r['module_seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="resnet50", choices=sorted(NETWORKS))
    parser.add_argument("--layers", default=":", help="a slice of the network's layers (A:B)")
    parser.add_argument("--passes", default="forward", choices=sorted(PASSES))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    parser.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"))
    parser.add_argument("--workers", type=int, default=None,
                        help="precompile's threads (default: one per CPU)")
    parser.add_argument("--out", default=None, help="directory for the JSON result")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="cupyconv-cold-") as tmp:
        for mode in MODES:
            if mode == "torch" and importlib.util.find_spec("torch") is None:
                continue
            cache = Path(tmp) / ("filled" if mode in ("first_call", "disk", "disk_precompile")
                                 else mode)
            env = dict(os.environ, CUPY_CACHE_DIR=str(cache / "cupy"),
                       CUPYCONV_CACHE_DIR=str(cache / "cupyconv"))
            env.pop("CUPYCONV_AUTOTUNE", None)
            cmd = [sys.executable, __file__, "--child", mode, "--network", args.network,
                   "--batch", str(args.batch), "--dtype", args.dtype, "--layout", args.layout,
                   "--layers", args.layers, "--passes", args.passes]
            if args.workers:
                cmd += ["--workers", str(args.workers)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                return 1
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            pre = f"precompile {row['precompile_s']:.2f} s, " if row["precompile_s"] else ""
            print(f"{args.network}[{args.layers}] {args.passes} batch {args.batch} {args.dtype} "
                  f"{args.layout} {mode:16s} "
                  f"{pre}first pass {row['first_pass_s']:.2f} s, second "
                  f"{row['second_pass_s'] * 1e3:.1f} ms; {row['modules']} modules, "
                  f"{row['module_seconds']:.2f} s in their compiles/loads", flush=True)
    if args.out:
        import cupy

        from bench import git_commit

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        name = (name.decode() if isinstance(name, bytes) else name).replace(" ", "_")
        tag = f"{args.network}-{args.passes}-b{args.batch}-{args.dtype}-{args.layout}"
        if args.layers != ":":
            tag += "-layers" + args.layers.replace(":", "_")
        path = Path(args.out) / f"cold-{tag}-{name}-{git_commit()}.json"
        path.write_text(json.dumps({"benchmark": "cold", "args": vars(args),
                                    "cpus": os.cpu_count(), "rows": rows}, indent=1))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
